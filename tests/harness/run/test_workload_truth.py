"""The workload `kvscope run` sends is the one asked for, against the real bundled engine
(tiny-random, CPU) and its real prefix cache: each run draws its own seed, so two runs
share no prompt; a rerun with the same --seed finds its prompts cached and the self-check
says so; warm-up requests enter no statistic; a Mooncake trace's shared blocks reach the
cache as shared prompts."""

from __future__ import annotations

import json

import pytest

from harness.analysis.summary import summarize
from harness.bundle.finding import codes
from harness.report.build import warmup_span
from harness.results import load
from tests.support.paths import ROOT
from tests.support.servers import engine, kvscope_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
# Prompts of ~200 tokens (~36 words of tiny-random's byte tokenizer): two independent draws
# of that length coincide with probability ~500^-36.
LOAD = ("--workload", "long_context", "--users", "2", "--prompt-tokens", "200", "--output-tokens", "6")


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory):
    # Room for every run's blocks: a rerun must find the first run's prompts still cached.
    with engine(tmp_path_factory.mktemp("engine"), "--num-blocks", "8192") as url:
        yield url


def _run(url, out, *args) -> None:
    rc, log, _ = kvscope_run("--target", url, "--no-advise", "--out", str(out), *args)
    assert rc == 0, log


def _prompts(bundle) -> set[tuple]:
    """The workload's prompts (the calibration probes are fixed texts, the same every run)."""
    r = load(bundle).measured
    return {(tuple(h), n) for h, n in zip(r["prompt_chunk_hashes"], r["prompt_chars"])}


@pytest.fixture(scope="module")
def warmed_run(engine_url, tmp_path_factory):
    out = tmp_path_factory.mktemp("warm") / "b"
    _run(engine_url, out, *LOAD, "--duration", "3s", "--warmup", "2s")
    return out


def test_runs_draw_their_own_seeds_and_a_repeated_seed_is_caught(engine_url, warmed_run, tmp_path):
    a, b, again = tmp_path / "a", warmed_run, tmp_path / "again"
    _run(engine_url, a, *LOAD, "--duration", "3s")
    seeds = [json.loads((d / "run.json").read_text())["seed"] for d in (a, b)]
    assert seeds[0] != seeds[1]
    assert _prompts(a).isdisjoint(_prompts(b))
    for d in (a, b):
        assert "unexpected_cache_hits" not in codes(load(d).summary["selfcheck"]["notes"])
    # The same seed again: the same prompts, which the server's cache still holds.
    _run(engine_url, again, *LOAD, "--duration", "3s", "--seed", str(seeds[0]))
    assert len(_prompts(again) & _prompts(a)) >= 4
    notes = load(again).summary["selfcheck"]["notes"]
    assert "unexpected_cache_hits" in codes(notes), notes


def test_warmup_requests_enter_no_statistic(warmed_run):
    r = load(warmed_run)
    warm, measured = r.requests[r.requests["phase"] == "warmup"], r.measured
    assert len(warm) >= 3 and len(measured) >= 3
    assert warm["send_time_unix"].max() < measured["send_time_unix"].min()
    s = summarize(r)
    ok = measured[measured["ok"]]
    assert s["requests"]["total"] == len(measured) and s["latency"]["ttft"]["count"] == len(ok)
    assert (
        s["throughput"]["window_s"]
        <= (measured["send_time_unix"] + measured["e2e_s"]).max() - (measured["send_time_unix"].min()) + 1e-6
    )
    assert r.run["config"]["warmup_s"] == 2.0
    # The report shades the warm-up before the first measured send (seconds from it).
    span = warmup_span(r.requests, float(measured["send_time_unix"].min()))
    assert span is not None and -3.0 < span[0] < -1.0 and span[1] == 0.0


def test_a_mooncake_trace_shares_its_blocks_in_the_servers_cache(engine_url, tmp_path):
    trace = ROOT / "tests" / "fixtures" / "traces" / "mooncake_sample.jsonl"
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    out = tmp_path / "m"
    _run(engine_url, out, "--workload", "replay", "--trace", str(trace), "--users", "8", "--duration", "5s")
    m = load(out).measured.sort_values("scheduled_time_unix").reset_index(drop=True)
    assert len(m) == len(rows) and m["ok"].all()
    # Each conversation's turns so far: (prompt tokens, when the reply ended). A turn can only
    # find the prompts of turns that ended before it was sent: on a loaded machine the trace's
    # one second between turns may not cover the previous turn's prefill.
    turns: dict[int, list[tuple[int, float]]] = {}
    for row, (_, rec) in zip(rows, m.iterrows()):
        first, sent = row["hash_ids"][0], rec["send_time_unix"]
        if first in turns:  # a later turn: each earlier turn's prompt is its prefix
            ended = [tokens for tokens, end in turns[first] if end <= sent]
            assert ended, (row, "no earlier turn ended before it was sent")
            assert rec["server_cached_prompt_tokens"] >= 0.8 * max(ended), (
                row,
                rec["server_cached_prompt_tokens"],
            )
        else:
            assert rec["server_cached_prompt_tokens"] < 64  # at most the chat template
        turns.setdefault(first, []).append((int(rec["prompt_tokens"]), sent + rec["e2e_s"]))
