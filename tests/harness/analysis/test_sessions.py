"""The session analysis on requests built turn by turn with known caching: turns whose cached
tokens cover the previous prompt (less a block) and turns whose history was evicted, the hit
ratio by turn, how sessions ended, the TTFT of evicted turns, and the figure."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.sessions import analyse_sessions, block_size_of, session_summary
from harness.analysis.summary import write_summary
from harness.bundle.read import normalise_requests, read_bundle
from harness.report.session_plots import sessions_by_turn
from harness.workload.record import RequestRecord
from harness.workload.sessions import digest
from tests.harness.bundle.factory import Spec, make_bundle

BLOCK = 16


def _turn(session: str, k: int, prompt: int, cached: int | None, ttft: float, **extra) -> dict:
    rec = RequestRecord(f"{session}-{k}", "w0", "multi_turn", "chat", 1000.0 + 10 * k + int(session[1:]))
    rec.ok, rec.usage_source, rec.prompt_tokens, rec.output_tokens = True, "server", prompt, 8
    rec.cached_tokens, rec.ttft_s, rec.e2e_s = cached, ttft, ttft + 0.5
    rec.session_id, rec.turn = session, k
    rec.history_hash, rec.conversation_hash = (
        digest([{"content": f"{session}{k}"}]),
        digest([{"content": f"{session}{k + 1}"}]),
    )
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec.to_dict()


def _requests() -> pd.DataFrame:
    """s0: kept every turn; s1: turn 2 evicted (cached falls to the system prompt), and the
    server preempted its turn 1; s2: ends in an error at turn 1; s3: open after turn 0.
    Prompts grow by 40 tokens a turn from 64."""
    rows = []
    for k in range(4):
        rows.append(_turn("s0", k, 64 + 40 * k, 48 + 40 * k if k else 32, 0.1))
    for k in range(4):
        cached = 32 if k in (0, 2) else 48 + 40 * k
        rows.append(
            _turn("s1", k, 64 + 40 * k, cached, 0.9 if k == 2 else 0.1, server_num_preemptions=int(k == 1))
        )
    rows.append(_turn("s2", 0, 64, 32, 0.1))
    failed = _turn("s2", 1, 104, None, float("nan"), session_end="error")
    failed.update(ok=False, error_class="http_5xx", prompt_tokens=None)
    rows.append(failed)
    rows.append(_turn("s3", 0, 64, 32, 0.1))
    rows[3]["session_end"] = rows[7]["session_end"] = "completed"
    rows.append({**_turn("x9", 0, 50, 0, 0.2), "session_id": None, "turn": None})  # not in a session
    frame = normalise_requests(pd.DataFrame(rows))
    # each turn continues the previous one, except s1's turn 3 (a client that lost the history)
    frame.loc[frame["request_id"] == "s1-3", "history_hash"] = "0" * 16
    for prev, cur in (
        ("s0-0", "s0-1"),
        ("s0-1", "s0-2"),
        ("s0-2", "s0-3"),
        ("s1-0", "s1-1"),
        ("s1-1", "s1-2"),
        ("s2-0", "s2-1"),
    ):
        frame.loc[frame["request_id"] == cur, "history_hash"] = frame.loc[
            frame["request_id"] == prev, "conversation_hash"
        ].iloc[0]
    return frame


def test_evictions_are_turns_whose_cache_fell_below_the_previous_prompt() -> None:
    a = analyse_sessions(_requests(), BLOCK)
    assert a.sessions == 4 and a.block_size == BLOCK
    assert a.ends == {"completed": 2, "overflow": 0, "error": 1, "cut": 0, "stopped": 0, "open": 1}
    assert a.continuing_turns == 6  # s0: 3, s1: 3; s2's turn 1 failed
    assert a.evicted_turns == 1 and a.sessions_evicted == 1 and a.history_cached == pytest.approx(5 / 6)
    assert a.sessions_preempted == 1
    assert a.history_carried == pytest.approx(5 / 6)  # s1's turn 3 did not carry its history
    assert a.ttft_evicted.count == 1 and a.ttft_evicted.p50 == 0.9 and a.ttft_kept.p50 == 0.1
    assert a.turns_per_session.max == 4 and a.completion_time_s.count == 2
    assert a.completion_time_s.max == pytest.approx(30.0 + 0.6)  # s1: sent 1001..1031, last e2e 0.6
    turns = {t.turn: t for t in a.by_turn}
    assert [turns[k].requests for k in range(4)] == [4, 2, 2, 2]
    assert turns[2].evicted == 1 and turns[1].evicted == 0
    assert turns[0].hit_ratio == pytest.approx(32 / 64)
    assert turns[2].hit_ratio == pytest.approx((128 + 32) / (144 * 2))
    assert turns[3].hit_ratio == pytest.approx(2 * 168 / (184 * 2))
    assert "1 turn(s) in 1 session(s) found it evicted" in a.to_dict()["verdict"]


def test_a_block_below_the_previous_prompt_is_still_kept() -> None:
    """The last partial block of a prompt is never cached: cached = previous - 15 is kept,
    previous - 17 is an eviction."""
    rows = [_turn("s0", 0, 100, 0, 0.1), _turn("s0", 1, 140, 85, 0.1), _turn("s0", 2, 180, 123, 0.1)]
    a = analyse_sessions(normalise_requests(pd.DataFrame(rows)), BLOCK)
    assert a.continuing_turns == 2 and a.evicted_turns == 1 and [t.evicted for t in a.by_turn] == [0, 0, 1]


def test_no_sessions_no_analysis_and_no_figure(tmp_path) -> None:
    rows = [{**_turn("x9", 0, 50, 0, 0.2), "session_id": None, "turn": None}]
    assert analyse_sessions(normalise_requests(pd.DataFrame(rows))) is None
    assert sessions_by_turn(None, tmp_path / "s.png") is None and not (tmp_path / "s.png").exists()


def test_the_block_size_is_the_servers_then_the_runs_then_none() -> None:
    server = pd.DataFrame({"kv_block_size_tokens": [float("nan"), 32.0]})
    assert block_size_of(server, 16) == 32
    assert block_size_of(pd.DataFrame({"x": [1]}), 16) == 16 and block_size_of(pd.DataFrame(), None) is None


def test_summary_json_carries_the_sessions_and_the_figure_draws_them(tmp_path) -> None:
    out = make_bundle(tmp_path / "b", Spec(n_requests=20, preempt_at_s=None))
    requests = _requests()
    requests.to_parquet(Path(out) / "requests.parquet")
    summary = write_summary(out)
    on_disk = json.loads((Path(out) / "summary.json").read_text())
    assert on_disk["sessions"] == summary["sessions"] == session_summary(read_bundle(out))
    assert summary["sessions"]["evicted_turns"] == 1 and len(summary["sessions"]["by_turn"]) == 4
    assert any("found it evicted" in line for line in summary["verdicts"])
    png = sessions_by_turn(analyse_sessions(requests, BLOCK), tmp_path / "fig" / "sessions.png")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
