"""The session workloads under plain `locust -f ... --headless`, against the SSE stand-in
(prompt tokens = words + 7; each answer is "tok " once per max_tokens, so the answer a turn
appends is exactly max_tokens words): every turn carries the whole conversation, --sessions
ends the run, a ShareGPT file replays turn by turn, a trace's session turns go in order, and
bad inputs end sessions or the run with a reason, never with a crashed user."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict

import pytest

from harness.results import load
from harness.workload.conversations import load_conversations
from tests.harness.load.test_workloads import locust
from tests.support.servers import ROOT, engine, kvscope_run, standin

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
CONVERSATIONS = ROOT / "tests" / "fixtures" / "conversations" / "sharegpt_multi_turn.json"
STANDIN_TEMPLATE = 7  # the stand-in's prompt tokens: words + 7


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with standin(tmp_path_factory.mktemp("standin"), "ok", 0.001) as u:
        yield u


def by_session(records: list[dict]) -> dict[str, list[dict]]:
    sessions: dict[str, list[dict]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r["session_id"] or "", r["turn"] or 0)):
        sessions[r["session_id"]].append(r)
    return dict(sessions)


def run_sessions(url: str, tmp, workload: str, sessions: int, *args: str, seconds: int = 60):
    """`locust -f loadtests/WORKLOAD.py -u 2 --sessions N ARGS` (no failed request, as Locust
    counts them): its measured records by session."""
    found = by_session(
        locust(url, tmp, workload, "-u", "2", "-r", "2", "--sessions", str(sessions), *args, seconds=seconds)
    )
    assert len(found) == sessions
    return found


def assert_each_turn_carries_the_last(turns: list[dict]) -> None:
    assert [t["turn"] for t in turns] == list(range(len(turns)))
    for before, after in zip(turns, turns[1:]):
        assert after["history_hash"] == before["conversation_hash"]
        assert after["send_time_unix"] >= before["send_time_unix"] + before["e2e_s"] - 0.01  # in order


def test_multi_turn_sessions_grow_by_answer_and_message_and_end_the_run(url, tmp_path) -> None:
    start = time.monotonic()
    sessions = run_sessions(
        url, tmp_path, "multi_turn", 7, "--turns", "3", "--user-tokens", "10", "--answer-tokens", "6",
        "--system-tokens", "20", "--turn-think-time", "0-0.05",
    )  # fmt: skip
    assert time.monotonic() - start < 40  # --sessions ended it, not -t
    assert all(len(t) == 3 for t in sessions.values())
    for turns in sessions.values():
        assert_each_turn_carries_the_last(turns)
        assert [t["session_end"] for t in turns] == [None, None, "completed"]
        assert turns[0]["prompt_tokens"] == STANDIN_TEMPLATE + 20 + 10  # calibrated to the server
        # each turn adds the previous answer (6 words) and a new message (10 words), exactly
        assert [b["prompt_tokens"] - a["prompt_tokens"] for a, b in zip(turns, turns[1:])] == [16, 16]
    assert len({t[0]["history_hash"] for t in sessions.values()}) == 1  # one shared system prompt


def test_a_sharegpt_file_replays_each_conversation_turn_by_turn(url, tmp_path) -> None:
    conversations = load_conversations(CONVERSATIONS).conversations
    sessions = run_sessions(
        url, tmp_path, "multi_turn", len(conversations), "--dataset", str(CONVERSATIONS),
        "--answer-tokens", "5", "--turn-think-time", "0",
    )  # fmt: skip
    replayed = []
    for turns in sessions.values():
        assert_each_turn_carries_the_last(turns)
        asked = [t["target_output_tokens"] for t in turns]
        match = [c for c in conversations if [x.answer_tokens or 5 for x in c.turns] == asked]
        assert len(match) == 1, asked
        conversation = match[0]
        replayed.append(conversation)
        words = [len(x.text.split()) for x in conversation.turns]
        system = len(conversation.system.split()) if conversation.system else 0
        # the human turns in order, each after the server's answer (max_tokens words)
        assert turns[0]["prompt_tokens"] == STANDIN_TEMPLATE + system + words[0]
        growth = [b["prompt_tokens"] - a["prompt_tokens"] for a, b in zip(turns, turns[1:])]
        assert growth == [asked[k] + words[k + 1] for k in range(len(turns) - 1)]
        assert turns[-1]["session_end"] == "completed"
    assert sorted(map(id, replayed)) == sorted(map(id, conversations))  # each exactly once


def test_agentic_sessions_share_the_preamble_and_append_tool_results(url, tmp_path) -> None:
    sessions = run_sessions(
        url, tmp_path, "agentic", 4, "--steps", "5", "--preamble-tokens", "300", "--task-tokens", "12",
        "--tool-tokens", "40", "--answer-tokens", "4",
    )  # fmt: skip
    assert all(len(t) == 5 for t in sessions.values())
    for turns in sessions.values():
        assert_each_turn_carries_the_last(turns)
        assert turns[0]["prompt_tokens"] == STANDIN_TEMPLATE + 300 + 12
        assert {b["prompt_tokens"] - a["prompt_tokens"] for a, b in zip(turns, turns[1:])} == {44}
    assert len({t[0]["history_hash"] for t in sessions.values()}) == 1  # the same preamble everywhere


def test_a_traces_session_turns_go_in_order_with_their_history(url, tmp_path) -> None:
    """A session's turns 40 ms apart in the trace, answers that take at least 60 ms (60
    tokens, 1 ms apart): each turn waits for the previous answer, so it leaves at least 20 ms
    late (recorded as lag), and carries the conversation."""
    rows = [
        {
            "arrival_s": 0.02 * k,
            "session_id": f"c{k % 2}",
            "prompt_tokens": 30 + 80 * (k // 2),
            "output_tokens": 60,
        }
        for k in range(8)
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    m = locust(url, tmp_path, "replay", "-u", "4", "-r", "4", "--trace", str(trace), seconds=8)
    sessions = by_session(m)
    assert sorted(sessions) == ["c0", "c1"] and all(len(t) == 4 for t in sessions.values())
    for turns in sessions.values():
        assert_each_turn_carries_the_last(turns)
        assert [t["session_end"] for t in turns] == [None, None, None, "completed"]
        assert [t["target_prompt_tokens"] for t in turns] == [30, 110, 190, 270] and turns[0][
            "prompt_tokens"
        ] == 30
        assert all(b["prompt_tokens"] > a["prompt_tokens"] + 60 for a, b in zip(turns, turns[1:]))  # + answer
        assert all(t["schedule_lag_s"] >= 0.02 for t in turns[1:])  # they waited for the answers


def test_an_answer_the_server_breaks_ends_its_session_counted(tmp_path) -> None:
    with standin(tmp_path, "broken", 0.001) as broken:
        out = subprocess.run(
            [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtests" / "multi_turn.py"), "--headless",
             "--host", broken, "-u", "2", "-r", "2", "-t", "60s", "--records-out", str(tmp_path / "r.jsonl"),
             "--sessions", "4", "--turns", "3", "--answer-tokens", "8", "--turn-think-time", "0"],
            capture_output=True, text=True, timeout=120, cwd=tmp_path,
        )  # fmt: skip
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    m = [r for r in records if r["phase"] == "measure"]
    assert len(m) == 4 and all(r["error_class"] == "stream_error" for r in m)
    assert [r["session_end"] for r in m] == ["error"] * 4 and all(r["turn"] == 0 for r in m)
    assert "Traceback" not in out.stderr, out.stderr[-3000:]


def test_a_dataset_without_conversations_stops_the_run_with_its_reason(tmp_path) -> None:
    bad = tmp_path / "empty.json"
    bad.write_text('[{"conversations": [{"from": "gpt", "value": "only an answer"}]}]')
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(ROOT / "loadtests" / "multi_turn.py"), "--headless",
         "--host", "http://127.0.0.1:9", "-u", "2", "-r", "2", "-t", "60s", "--dataset", str(bad),
         "--no-calibrate"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert time.monotonic() - start < 30
    assert (
        "the multi_turn workload cannot run" in out.stderr
        and "no conversation with a human turn" in out.stderr
    )
    assert "Traceback" not in out.stderr, out.stderr[-3000:]


def test_sessions_end_before_they_overflow_the_context(tmp_path) -> None:
    """tiny-random with a 1,024-token context: sessions stop at the turn that would not fit,
    and say so, instead of sending requests the server refuses."""
    with engine(tmp_path, "--max-model-len", "1024") as target:
        sessions = run_sessions(
            target, tmp_path, "multi_turn", 4, "--turns", "50", "--user-tokens", "20", "--answer-tokens", "8",
            "--system-tokens", "0", "--turn-think-time", "0", seconds=90,
        )  # fmt: skip
    for turns in sessions.values():
        assert turns[-1]["session_end"] == "overflow" and 3 <= len(turns) < 50
        last = turns[-1]
        assert last["prompt_tokens"] + last["output_tokens"] <= 1024


def test_sessions_count_across_workers_and_the_run_ends_itself(url, tmp_path) -> None:
    rc, log, seconds = kvscope_run(
        "--target", url, "--workload", "multi_turn", "--workers", "2", "--users", "4", "--sessions", "9",
        "--turns", "2", "--user-tokens", "5", "--answer-tokens", "3", "--turn-think-time", "0",
        "--duration", "90s", "--out", str(tmp_path / "b"), "--no-advise",
    )  # fmt: skip
    assert rc == 0, log
    assert seconds < 75
    bundle = load(tmp_path / "b")
    assert (
        bundle.summary["sessions"]["sessions"] == 9 and bundle.summary["sessions"]["ends"]["completed"] == 9
    )
    ids = set(bundle.requests["session_id"].dropna())
    assert len(ids) == 9 and len({i.split(":")[0] for i in ids}) == 2  # both workers ran sessions
    assert sorted(int(i.split(":s")[1]) for i in ids) == list(range(9))
