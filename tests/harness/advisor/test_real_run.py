"""The advisor on a real `kvscope run` bundle: the bundled engine (tiny-random on CPU) with
a 40-block pool under a closed-loop load that preempts, then `kvscope advise` on the bundle.
The replay keeps the engine's own pool, times its steps with a fit to the run's own server
timings, and holds its baseline against the run before it verifies anything."""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.run.commands import kvscope_command
from tests.harness.bundle.findings_check import assert_coded
from tests.support.servers import ROOT, kvscope_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def kvscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(kvscope_command(*args), capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def preempting_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "b"
    # Closed loop: 16 requests of ~160 tokens (10 blocks) always in flight against a 40-block
    # pool preempts however fast or slow the machine is (an open-loop rate would not). 30 s, not
    # 15: the TTFT p99 of a short run is a handful of requests that met one busy moment of the
    # machine (see the fidelity test below).
    rc, log, _ = kvscope_run(
        "--workload",
        "long_context",
        "--users",
        "16",
        "--duration",
        "30s",
        "--prompt-tokens",
        "64",
        "--output-tokens",
        "96",
        "--num-blocks",
        "40",
        "--max-num-seqs",
        "16",
        "--model",
        "tiny-random",
        "--out",
        str(out),
    )
    assert rc == 0, log
    return out


def test_a_preempting_real_run_is_told_to_quantize_or_add_memory_verified_by_replay(preempting_run):
    out = kvscope("advise", str(preempting_run), "--json")
    assert out.returncode == 0, out.stderr
    advice = json.loads(out.stdout)
    assert advice["deployment"]["bundled_engine"] and not advice["deployment"]["simulated"]
    assert advice["deployment"]["num_blocks"] == 40
    assert advice["diagnosis"]["kv_pressure"], advice["diagnosis"]
    verdicts = {v["action"]: v for v in advice["verdicts"]}
    assert {"quantize_kv_cache", "add_memory"} <= set(verdicts)
    # run.json, summary.json and advice.json: every finding in them carries a registered code.
    assert "completed" in assert_coded(preempting_run)
    fidelity = advice["fidelity"]
    run_preemptions = advice["diagnosis"]["preemptions"]
    assert fidelity["measured"]["preemptions"] == run_preemptions and fidelity["tolerance"] == 0.25
    for v in verdicts.values():
        r, base, changed = v["replay"], v["replay"]["baseline"], v["replay"]["changed"]
        # Closed loop: a pool still short of the demand may preempt as often (its users send
        # sooner), but serves them sooner; the replay shows the gain one way or the other.
        assert r["shown"] and (
            changed["preemptions"] < base["preemptions"] or changed["ttft_p99_s"] < 0.95 * base["ttft_p99_s"]
        ), v
        assert r["baseline_fidelity"] == fidelity
        # Verified only over a baseline that reproduces the run; else indicative, and why.
        assert (
            v["status"] == ("verified" if fidelity["within"] else "indicative")
            and v["verified"] == (fidelity["within"])
        ), v
        if not fidelity["within"]:
            assert v["status_reason"]["code"] == "replay_off_run"
    # The replay of the run as it was reproduces its preemptions (same pool, same scheduler).
    assert 0.5 * run_preemptions <= fidelity["replayed_preemptions"] <= 2 * run_preemptions
    assert advice["time_axis"].startswith("the run's own seconds: 40-block pool, step times fitted")
    assert (preempting_run / "advice.json").exists()


def test_the_replay_of_the_run_as_it_was_reproduces_its_preemptions_and_ttft_tail(preempting_run):
    """The suite's short fidelity check (the demo configuration's, 3 runs of 75 s on SmolLM2, is
    benchmarks/replay_fidelity.py): closed loop, step times fitted to the engine's own timings
    with the speed drift and stalls of a shared machine, the replay reproduces the run's
    preemptions within 25%, and its TTFT p99 within 50%: tiny-random's steps last a few ms, so
    on a loaded 2-core machine the scheduler's jitter is a large share of each. The replay comes
    out short of the run's tail when the machine was busy in bursts: beside CPU bursts of 50-400
    ms (three processes), 15 s runs measured -22%, -16%, -7%, and one in a full suite -71%; 30 s
    runs -8%, -8%, -10% (their p99 is no longer a few requests of one busy moment). The 25%
    bound is the benchmark's, on a quiet machine."""
    advice = json.loads((preempting_run / "advice.json").read_text())
    fidelity = advice["fidelity"]
    assert abs(fidelity["preemption_error"]) <= 0.25, fidelity
    assert abs(fidelity["ttft_error"]) <= 0.5, fidelity
    assert fidelity["measured"]["ttft_source"] == "server"
    assert "closed loop: 16 users (by user id)" in advice["time_axis"]
