"""The session workloads on the bundled engine with the real SmolLM2-135M (CPU): with a pool
that holds every conversation, each turn finds the previous turn's prompt cached and the hit
ratio rises with the turn; with a pool too small for the sessions that think between turns,
their histories are evicted and the summary says so; an agent loop over a shared preamble is
served mostly from the cache. Each figure is checked against requests.parquet itself."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.advisor.advice import advise
from harness.advisor.run_inputs import load as advisor_inputs
from harness.results import load
from tests.support.servers import kvscope_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
BLOCK = 16  # the bundled engine's default block size
CHAT = (
    "--workload", "multi_turn", "--turns", "4", "--user-tokens", "24", "--answer-tokens", "12",
    "--system-tokens", "64", "--duration", "5m",
)  # fmt: skip


def run(tmp_path, name: str, *args: str):
    rc, log, _ = kvscope_run(*args, "--out", str(tmp_path / name), "--no-advise", timeout_s=500)
    assert rc == 0, log
    return load(tmp_path / name)


def continuing_turns(requests: pd.DataFrame) -> pd.DataFrame:
    """Each measured turn k >= 1 beside its session's turn k-1, from the parquet alone."""
    turns = requests[requests["session_id"].notna() & (requests["phase"] == "measure")].copy()
    turns["turn"] = turns["turn"].astype(int)
    previous = turns[["session_id", "turn", "prompt_tokens", "output_tokens", "conversation_hash"]]
    previous = previous.assign(turn=previous["turn"] + 1).add_prefix("previous_")
    return turns.merge(
        previous, left_on=["session_id", "turn"], right_on=["previous_session_id", "previous_turn"]
    )


@pytest.fixture(scope="module")
def large_pool(tmp_path_factory):
    return run(
        tmp_path_factory.mktemp("large"), "b", *CHAT, "--users", "4", "--sessions", "20",
        "--turn-think-time", "0", "--num-blocks", "512",
    )  # fmt: skip


def test_every_turn_carries_the_whole_conversation(large_pool) -> None:
    requests = large_pool.measured
    assert requests["ok"].all() and requests["session_id"].nunique() == 20
    assert all(
        sorted(turns.astype(int)) == [0, 1, 2, 3] for _, turns in requests.groupby("session_id")["turn"]
    )
    pairs = continuing_turns(requests)
    assert len(pairs) == 60
    assert (pairs["history_hash"] == pairs["previous_conversation_hash"]).all()
    # the server counted the previous prompt, its answer and a new message in each prompt
    assert (pairs["prompt_tokens"] > pairs["previous_prompt_tokens"] + pairs["previous_output_tokens"]).all()


def test_the_previous_prompt_is_found_cached_and_the_hit_ratio_rises(large_pool) -> None:
    pairs = continuing_turns(large_pool.measured)
    kept = pairs["cached_tokens"] >= pairs["previous_prompt_tokens"] - BLOCK
    assert kept.mean() >= 0.9, pairs[~kept][["session_id", "turn", "cached_tokens", "previous_prompt_tokens"]]
    sessions = large_pool.summary["sessions"]
    assert sessions["history_cached"] == pytest.approx(kept.mean())
    assert sessions["ends"]["completed"] == 20 and sessions["evicted_turns"] == (~kept).sum()
    hit = [t["hit_ratio"] for t in sessions["by_turn"]]
    assert len(hit) == 4 and min(hit[1:]) > hit[0] and hit[3] > hit[0] + 0.1, hit
    print(f"large pool: history cached {kept.mean():.1%} of {len(pairs)} turns; hit ratio by turn {hit}")


@pytest.fixture(scope="module")
def small_pool(tmp_path_factory):
    # All eight users start at once: staggered over the default ramp (10 s), sessions that last a
    # few seconds on a quick machine barely overlap, so few histories are evicted and the
    # sessions' curve gains too little for add_memory (a suite run: +4% for +200% blocks).
    tmp_path = tmp_path_factory.mktemp("small")
    bundle = run(
        tmp_path, "b", *CHAT, "--users", "8", "--spawn-rate", "8", "--sessions", "8", "--turns", "3",
        "--turn-think-time", "0.5-1", "--num-blocks", "32",
    )  # fmt: skip
    return tmp_path, bundle


def test_a_small_pool_evicts_histories_between_turns(small_pool) -> None:
    tmp_path, bundle = small_pool
    pairs = continuing_turns(bundle.measured)
    evicted = pairs["cached_tokens"] < pairs["previous_prompt_tokens"] - BLOCK
    sessions = bundle.summary["sessions"]
    assert evicted.sum() >= 2 and sessions["evicted_turns"] == evicted.sum()
    assert sessions["sessions_evicted"] == pairs[evicted]["session_id"].nunique()
    assert sum(t["evicted"] for t in sessions["by_turn"]) == evicted.sum()
    assert sessions["ttft_evicted"]["count"] == evicted.sum()
    # the report's sessions section shows it: its by-turn table and figure
    report = (tmp_path / "b" / "report.md").read_text()
    section = report.split("## Sessions", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert sum(int(row[8]) for row in rows) == evicted.sum(), section
    assert "plots/sessions.png" in section and (tmp_path / "b" / "plots" / "sessions.png").is_file()
    print(
        f"small pool: {evicted.sum()} of {len(pairs)} turns evicted "
        f"in {sessions['sessions_evicted']} sessions; "
        f"hit ratio by turn {[t['hit_ratio'] for t in sessions['by_turn']]}; "
        f"{sessions['sessions_preempted']} sessions preempted"
    )


def test_the_advisor_replays_the_sessions_and_reproduces_their_hit_ratio(small_pool) -> None:
    """The unchanged replay of the session trace hits what the run hit (within 5 points), and
    add_memory for prefix reuse is advised from the sessions' curve, replayed over them."""
    tmp_path, bundle = small_pool
    advice = advise(advisor_inputs(tmp_path / "b")).to_json()
    done = bundle.measured[bundle.measured["ok"]]
    run_hit = done["cached_tokens"].sum() / done["prompt_tokens"].sum()
    fidelity = advice["fidelity"]
    assert fidelity["measured"]["hit_ratio"] == pytest.approx(run_hit)
    replayed = fidelity["replayed_hit_ratio"]
    print(f"small pool: run hit ratio {run_hit:.1%}, unchanged replay {replayed:.1%}")
    assert abs(replayed - run_hit) <= 0.05 and fidelity["hit_ratio_within"]
    sessions = advice["workload"]["sessions"]
    assert sessions["sessions"] == 8 and sessions["continuing_turns"] == 16
    assert 0.3 < sessions["history_share"] < 0.9
    kept = [p["history_kept"] for p in sessions["reuse_curve"]]
    assert kept[0] < 1.0 and kept == sorted(kept) and kept[-1] == 1.0, sessions["reuse_curve"]
    # The curve's add_memory; a run whose small pool also preempted (one suite run: 2) has the
    # KV-pressure add_memory as well, ranked first.
    add = next(v for v in advice["verdicts"] if v["action"] == "add_memory" and "source" in v["evidence"])
    assert add["evidence"]["source"].startswith("the sessions'")
    pressure = [
        v for v in advice["verdicts"] if v["action"] == "add_memory" and "source" not in v["evidence"]
    ]
    assert len(pressure) == int(advice["diagnosis"]["kv_pressure"]), advice["diagnosis"]
    replay = add["replay"]
    assert "8 conversations replayed as sessions" in replay["time_axis"], replay["time_axis"]
    assert replay["baseline"]["prefix_hit_ratio"] == pytest.approx(replayed)
    assert replay["changed"]["prefix_hit_ratio"] > replayed
    print(f"add_memory: {add['status']}: {add['effect']}; {replay['why']['text']}")


def test_an_agent_loop_is_served_from_the_cache(tmp_path) -> None:
    bundle = run(
        tmp_path, "b", "--workload", "agentic", "--users", "4", "--sessions", "8", "--steps", "6",
        "--preamble-tokens", "512", "--task-tokens", "32", "--tool-tokens", "48", "--answer-tokens", "8",
        "--duration", "5m", "--num-blocks", "1024",
    )  # fmt: skip
    requests = bundle.measured
    assert requests["ok"].all() and len(requests) == 48
    share = (requests["cached_tokens"] / requests["prompt_tokens"]).mean()
    assert share >= 0.8, requests[["session_id", "turn", "prompt_tokens", "cached_tokens"]]
    assert bundle.summary["sessions"]["history_cached"] == 1.0
    print(f"agentic: mean cached share of prompt tokens {share:.1%} over {len(requests)} calls")
