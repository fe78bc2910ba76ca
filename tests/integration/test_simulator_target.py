"""The bundled simulator reached through `--target`, as a new user would: the advisor knows only
what the server states (its /v1/models and /metrics) and what the user states with
`--deployment`. Without it, nothing the server did not state is assumed (no replay on a guessed
model or GPU; only settings that cannot bind in the run) and the advice says what to pass;
with a `--deployment` matching the simulator's flags, the verdicts are those of the run where
kvscope started the same simulator itself."""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.results import load
from harness.run.commands import kvscope_command
from tests.support.paths import ROOT
from tests.support.servers import engine, kvscope_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
# Llama 3.1 70B on two H100s with a 400-block pool: eight closed-loop users with requests of
# ~1,200 tokens (75 blocks) need ~600 blocks, so requests queue on a full pool all along and
# some are preempted. 20 s gives each user two or three requests of ~10 s: a shorter trace let a
# loaded machine's run replay to a demand within the pool (seen once in CI).
SIM = ("--simulate", "--sim-model", "llama-3.1-70b", "--sim-gpu", "h100-80gb", "--tensor-parallel-size", "2")
POOL = ("--num-blocks", "400")
LOAD = (
    "--workload", "long_context", "--users", "8", "--duration", "20s",
    "--prompt-tokens", "1000", "--output-tokens", "200", "--no-calibrate",
)  # fmt: skip
MATCHING = (
    "model=llama-3.1-70b,gpu=h100-80gb,tp=2,gpu-memory-utilization=0.9,max-num-seqs=64,"
    "max-num-batched-tokens=2048"
)  # the simulator's flags above and the engine's defaults for the rest


def advice_of(folder) -> dict:
    out = subprocess.run(
        kvscope_command("advise", str(folder), "--json"),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sim")
    rc, log, _ = kvscope_run(*LOAD, "--model", "tiny-random", *SIM, *POOL, "--out", str(tmp / "bundled"))
    assert rc == 0, log
    with engine(tmp, *SIM, *POOL) as url:
        rc, log, _ = kvscope_run("--target", url, *LOAD, "--out", str(tmp / "bare"))
        assert rc == 0, log
        rc, log, _ = kvscope_run(
            "--target", url, *LOAD, "--deployment", MATCHING, "--out", str(tmp / "stated")
        )
        assert rc == 0, log
    return {name: (load(tmp / name), advice_of(tmp / name)) for name in ("bundled", "bare", "stated")}


def verdicts(advice: dict) -> dict[str, bool]:
    return {v["action"]: v["verified"] for v in advice["verdicts"]}


def shown(advice: dict) -> dict[str, bool]:
    """Whether each action's replay showed the gain. "Verified" adds that the unchanged replay
    reproduced this run within tolerance, which the load on the test machine can spoil for one
    run and not the other; then the verdict must say "indicative" and why."""
    for v in advice["verdicts"]:
        assert v["status"] != "indicative" or v["status_reason"], v
    return {v["action"]: v["status"] in ("verified", "indicative") for v in advice["verdicts"]}


def summary(advice: dict) -> str:
    """What a failed comparison needs: each verdict's status and its replays, and the notes."""
    lines = [f"diagnosis {advice['diagnosis']}", f"fidelity {advice.get('fidelity')}"]
    for v in advice["verdicts"]:
        r = v.get("replay") or {}
        lines.append(
            f"{v['action']}: {v['status']} ({(v.get('status_reason') or {}).get('text')}); "
            f"baseline {r.get('baseline')}; changed {r.get('changed')}; "
            f"basis {r.get('time_axis')}"
        )
    lines += [f"note {n.get('code')}: {n.get('text')}" for n in advice.get("notes", [])]
    return "\n".join(lines)


def test_without_deployment_nothing_unstated_is_assumed_and_the_advice_says_what_to_pass(runs):
    bundle, advice = runs["bare"]
    # Pressure, from preemption or from requests queueing on a full pool: which of the two
    # depends on how arrivals fall, and a loaded machine can keep the run from preempting.
    assert advice["diagnosis"]["kv_pressure"]
    facts = bundle.run["deployment"]
    assert "max_num_seqs" not in facts["engine"] and facts["catalogue"] == {}
    assert {f["source"] for f in facts["engine"].values()} <= {
        "server (/v1/models)",
        "server (vllm /metrics)",
        "server (vllm: a paged KV cache)",
    }
    # The pool, block size and cache dtype are stated by cache_config_info; the verdicts that
    # rest on them stay unverified: no replay runs on a model, GPU or max_num_seqs nobody stated.
    assert not any(verdicts(advice).values())
    assert not any("max_num_seqs=" in v["effect"] for v in advice["verdicts"])
    assert advice["deployment"]["max_num_seqs"] is None and advice["deployment"]["gpu"] is None
    missing = {m["fact"]: m for m in advice["missing_facts"]}
    # No step timings from this server, so the replay needs the catalogue's model and GPU; 8
    # users of 1,000-token prompts could meet vLLM's smallest batched-token budget (2,048), so
    # that is asked for; 8 users can never meet its smallest max_num_seqs (128), so that is not.
    assert {"model", "gpu", "max_num_batched_tokens"} <= set(missing) and "max_num_seqs" not in missing
    assert missing["max_num_batched_tokens"]["supply"] == "--deployment max-num-batched-tokens=N"
    assert "state it with --deployment max-num-batched-tokens=N" in advice["markdown"]


def test_a_matching_deployment_gives_the_bundled_simulators_verdicts(runs):
    bundle, stated = runs["stated"]
    bundled = runs["bundled"][1]
    engine_facts = bundle.run["deployment"]["engine"]
    assert engine_facts["max_num_seqs"] == {"value": 64, "source": "user (--deployment)"}
    assert engine_facts["num_blocks"] == {"value": 400, "source": "server (vllm /metrics)"}
    assert bundle.run["deployment"]["catalogue"]["gpu"]["source"] == "user (--deployment)"
    assert stated["missing_facts"] == []
    for name, (b, a) in (("stated", runs["stated"]), ("bundled", runs["bundled"])):
        print(f"{name}: {b.run.get('status')}, {len(b.requests)} requests, {int(b.requests['ok'].sum())} ok")
        print(summary(a))
    assert shown(stated) == shown(bundled)
    assert {"quantize_kv_cache", "add_memory"} <= set(shown(bundled)) and all(shown(bundled).values())
