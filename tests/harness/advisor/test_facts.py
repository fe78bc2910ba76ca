"""The advisor never fills in a fact no source stated: a --target run's verdicts that need an
unknown fact are not issued and its replays not run, the advice naming each missing fact and
the --deployment key that states it; stated, the same run is advised exactly as when kvscope
started the simulator itself; and a replay whose baseline does not resemble the run verifies
nothing."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from harness.advisor import run_inputs
from harness.advisor.advice import advise
from harness.bundle.deployment import SERVER_MODELS, DeploymentFacts, Fact
from harness.bundle.deployment_option import parse_deployment
from harness.bundle.finding import codes
from reference_engine.config import EngineConfig
from reference_engine.sim.engine import SimSpec
from tests.harness.advisor.bundles import long_requests, simulate_bundle

LLAMA70_TP2 = SimSpec("llama-3.1-70b", "h100-80gb", 2, 0.9)
ENGINE = EngineConfig(max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=4096)
POOL_VERDICTS = {"quantize_kv_cache", "add_memory", "cut_context", "raise_memory_utilization"}
# What the simulator's own endpoints state when it is a --target (/v1/models, cache_config_info).
SERVER_STATED = {
    "model": ("llama-3.1-70b", SERVER_MODELS),
    "max_model_len": (8192, SERVER_MODELS),
    "kv_cache_dtype": ("auto", "server (vllm /metrics)"),
    "enable_prefix_caching": (True, "server (vllm /metrics)"),
    "allocator": ("paged", "server (vllm: a paged KV cache)"),
}
MATCHING = (
    "model=llama-3.1-70b,gpu=h100-80gb,tp=2,gpu-memory-utilization=0.9,max-num-seqs=256,"
    "max-num-batched-tokens=4096,block-size=16"
)


@pytest.fixture(scope="module")
def preempting(tmp_path_factory):
    return simulate_bundle(
        tmp_path_factory.mktemp("preempting"),
        long_requests(50, 0.5),
        LLAMA70_TP2,
        ENGINE,
        model="llama-3.1-70b",
    )


def as_target(folder, engine: dict | None = None):
    """The bundle as a --target run that stated `engine` (name -> (value, source))."""
    run = json.loads((folder / "run.json").read_text())
    facts = DeploymentFacts("target", {k: Fact(v, src) for k, (v, src) in (engine or {}).items()})
    run.update(target="http://127.0.0.1:8000", bundled_engine=False, deployment=facts.to_json())
    (folder / "run.json").write_text(json.dumps(run))
    return folder


def copy_bundle(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_a_target_that_stated_nothing_gets_no_invented_verdict(preempting, tmp_path):
    advice = advise(run_inputs.load(as_target(copy_bundle(preempting, tmp_path / "t")))).to_json()
    assert advice["diagnosis"]["kv_pressure"]
    issued = {v["action"] for v in advice["verdicts"]}
    # The pool and block size are in the samples (cache_config_info): add_memory may rest on them,
    # unverified; the cache dtype and the allocator nobody stated.
    assert issued & POOL_VERDICTS <= {"add_memory"}
    assert not any(v["verified"] or v["replay"] for v in advice["verdicts"])
    lacking = {m["fact"]: m for m in advice["missing_facts"]}
    # A replay runs on the pool in blocks: the cache dtype matters to the verdict, not to it.
    assert lacking["kv_cache_dtype"]["needed_for"] == ["quantize_kv_cache"]
    assert "replays" in lacking["allocator"]["needed_for"]
    assert "cut_context" in lacking["allocator"]["needed_for"]
    assert lacking["max_num_seqs"] == {
        "fact": "max_num_seqs",
        "needed_for": ["replays"],
        "supply": "--deployment max-num-seqs=N",
    }
    lacking_facts = [n.get("subject") for n in advice["notes"] if n["code"] == "rule_lacks_facts"]
    assert "quantize_kv_cache" in lacking_facts, advice["notes"]
    assert advice["deployment"]["max_num_seqs"] is None and advice["deployment"]["engine_model"] is None


def test_stated_facts_give_the_verdicts_of_the_simulator_kvscope_started(preempting, tmp_path):
    bundled = advise(run_inputs.load(preempting)).to_json()
    target = as_target(copy_bundle(preempting, tmp_path / "t"), SERVER_STATED)
    stated = advise(run_inputs.load(target, parse_deployment(MATCHING))).to_json()
    assert stated["missing_facts"] == []

    def outcome(advice):
        return {
            v["action"]: (v["verified"], v["projected"], (v["replay"] or {}).get("changed"))
            for v in advice["verdicts"]
        }

    assert outcome(stated) == outcome(bundled) and {"quantize_kv_cache", "add_memory"} <= set(outcome(stated))
    assert all(v["verified"] for v in stated["verdicts"])


def test_waiting_with_low_usage_on_a_target_does_not_name_an_unknown_limit(tmp_path):
    engine = EngineConfig(max_model_len=8192, max_num_seqs=2, max_num_batched_tokens=4096)
    folder = simulate_bundle(
        tmp_path / "b",
        long_requests(40, 0.2, prompt=(200, 400), output=(100, 200)),
        SimSpec("llama-3.1-8b", "h100-80gb", 1, 0.9),
        engine,
        model="llama-3.1-8b",
    )
    advice = advise(run_inputs.load(as_target(folder))).to_json()
    (v,) = advice["verdicts"]
    assert v["action"] == "kv_not_bottleneck" and "max_num_seqs=" not in v["effect"]
    assert "which limit binds is unknown" in v["effect"] and v["evidence"]["max_num_seqs"] is None
    needed = {m["fact"]: m["needed_for"] for m in advice["missing_facts"]}
    assert needed["max_num_seqs"] == ["kv_not_bottleneck", "replays"]


def test_a_replay_unlike_the_run_verifies_nothing(preempting, tmp_path):
    """The client saw TTFTs a thousand times the modelled ones (the replay models some other
    deployment): no verdict may be verified by it, and the advice says why."""
    folder = copy_bundle(preempting, tmp_path / "t")
    requests = pd.read_parquet(folder / "requests.parquet")
    requests["ttft_s"] *= 1000
    requests.to_parquet(folder / "requests.parquet")
    advice = advise(run_inputs.load(folder)).to_json()
    assert advice["verdicts"] and not any(v["verified"] for v in advice["verdicts"])
    assert all(v["replay"]["implausible"]["code"] == "replay_implausible" for v in advice["verdicts"])
    assert all(
        v["status_reason"]["code"] == "replay_implausible" for v in advice["verdicts"] if v["replay"]["shown"]
    )
    assert "replays_not_trusted" in codes(advice["notes"])
    fine = advise(run_inputs.load(preempting)).to_json()
    assert "replays_not_trusted" not in codes(fine["notes"]) and fine["verdicts"][0]["verified"]


def test_the_bundle_is_not_changed_by_stated_facts(preempting):
    before = (preempting / "run.json").read_text()
    inputs = run_inputs.load(preempting, parse_deployment("max-num-seqs=128"))
    assert inputs.deployment.known("max_num_seqs") == 128
    assert codes(inputs.notes) == ["deployment_replaced"]
    assert (
        inputs.notes[0].text == "--deployment max_num_seqs=128 replaces 256 from kvscope run (bundled engine)"
    )
    assert (preempting / "run.json").read_text() == before
