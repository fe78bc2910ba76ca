"""The advisor end to end on simulated runs: each scenario is a bundle written by the
simulator (tests/harness/advisor_bundles.py), advised with replays, and checked for the verdicts a
serving engineer would give — and for replays that back them up."""

from __future__ import annotations

import pytest

from harness.advisor import run_inputs, sizing
from harness.advisor.advice import advise
from harness.advisor.record import Advice
from harness.advisor.verdicts import ACTIONS
from harness.bundle.finding import codes
from harness.report.advice import NO_CHANGE, STATUS, advice_blocks, advice_markdown
from harness.report.document import Bullets, Heading, Para
from reference_engine.catalogue import get_gpu, get_model
from reference_engine.config import EngineConfig
from reference_engine.sim.engine import SimSpec
from tests.harness.advisor.bundles import long_requests, shared_prefix_requests, simulate_bundle

LLAMA70_TP2 = SimSpec("llama-3.1-70b", "h100-80gb", 2, 0.9)
KV_ACTIONS = {"quantize_kv_cache", "cut_context", "add_memory", "raise_memory_utilization"}


def _advise(tmp_path_factory, name, trace, spec, engine, **kw):
    folder = simulate_bundle(tmp_path_factory.mktemp(name), trace, spec, engine, **kw)
    return advise(run_inputs.load(folder)).to_json()


def _by_action(advice):
    return {v["action"]: v for v in advice["verdicts"]}


@pytest.fixture(scope="module")
def preempting(tmp_path_factory):
    """Llama 3.1 70B on two H100s: ~1,400 blocks for requests of ~2,400 tokens arriving
    every 0.5 s: the pool holds ~9 of them, so requests are preempted all run long."""
    engine = EngineConfig(max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=4096)
    return _advise(
        tmp_path_factory, "preempting", long_requests(50, 0.5), LLAMA70_TP2, engine, model="llama-3.1-70b"
    )


def test_persistent_preemption_is_told_to_quantize_and_add_memory_each_verified(preempting):
    diag = preempting["diagnosis"]
    assert diag["kv_pressure"] and diag["preemption_level"] == "act" and diag["preemptions"] > 0
    verdicts = _by_action(preempting)
    assert {"quantize_kv_cache", "add_memory"} <= set(verdicts) <= set(ACTIONS)
    for v in verdicts.values():
        replay = v["replay"]
        assert v["verified"] and replay["shown"], v
        assert replay["changed"]["preemptions"] < replay["baseline"]["preemptions"], v
        assert replay["changed"]["completed"] == replay["baseline"]["completed"] == 50
    # Baseline replay reproduces the run it replays (same cost model, same pool).
    assert (
        verdicts["add_memory"]["replay"]["baseline"]["num_blocks"] == preempting["deployment"]["num_blocks"]
    )


def test_quantize_projection_is_the_sizing_arithmetic(preempting):
    q = _by_action(preempting)["quantize_kv_cache"]
    model, gpu = get_model("llama-3.1-70b"), get_gpu("h100-80gb")
    budget = sizing.gpu_kv_budget_bytes(model, gpu, tp=2)
    assert q["evidence"]["pool_blocks"] == sizing.num_blocks(budget, sizing.block_bytes(model, "auto", 2))
    assert q["projected"]["pool_blocks"] == sizing.num_blocks(budget, sizing.block_bytes(model, "fp8", 2))
    assert q["projected"]["capacity_factor"] == pytest.approx(2.0, abs=0.01)
    assert (
        q["evidence"]["kv_bytes_per_token_per_gpu"]
        == 2 * q["evidence"]["kv_bytes_per_token_per_gpu_fp8"]
        == 163_840
    )


def test_add_memory_names_a_catalogue_deployment_that_holds_the_measured_demand(preempting):
    a = _by_action(preempting)["add_memory"]
    demand = a["evidence"]["demand_blocks"]
    assert demand > a["evidence"]["pool_blocks"]
    best = a["evidence"]["options"][0]
    assert (
        best["option"] == a["projected"]["option"]
        and best["pool_blocks_per_replica"] * a["projected"]["replicas"] >= demand
    )
    assert a["replay"]["changed"]["preemptions"] == 0
    kinds = [o["option"] for o in a["evidence"]["options"]]
    assert any("replicas" in k for k in kinds) and len(kinds) >= 2


def test_paged_run_is_not_told_to_cut_a_context_nobody_exceeds(preempting):
    assert "cut_context" not in _by_action(preempting)
    assert "context_never_exceeded" in codes(preempting["notes"])
    lengths = preempting["workload"]["lengths"]
    assert lengths["suggested_max_model_len"] == 3072 and lengths["max_share_of_limit"] < 0.4


def test_the_advice_section_lists_verified_verdicts_first_with_their_replays(preempting):
    blocks = advice_blocks(Advice.from_json(preempting))
    headings = [b.text for b in blocks if isinstance(b, Heading)]
    first = preempting["verdicts"][0]
    assert (
        first["verified"] and headings[0] == f"1. {first['title']} ({first['action']}, {STATUS['verified']})"
    )
    (replayed, *_) = [b for b in blocks if isinstance(b, Bullets)]
    assert any(item.startswith("Replay of ") for item in replayed.items)
    notes = blocks.index(Para("Also checked:"))
    assert blocks[notes + 1] == Bullets([n["text"] for n in preempting["notes"]])
    md = advice_markdown(Advice.from_json(preempting))
    assert md.startswith("## Advice\n") and md.index(first["title"]) < md.index("Also checked")


def test_contiguous_reservations_are_told_to_cut_context(tmp_path_factory):
    engine = EngineConfig(
        max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=4096, allocator="contiguous"
    )
    advice = _advise(
        tmp_path_factory, "contiguous", long_requests(16, 1.0), LLAMA70_TP2, engine, model="llama-3.1-70b"
    )
    assert advice["diagnosis"]["kv_pressure"] and advice["diagnosis"]["waiting_kv_blocked_share"] > 0.5
    cut = _by_action(advice)["cut_context"]
    assert cut["verified"] and cut["projected"]["max_model_len"] == 3072
    assert cut["projected"]["concurrency_at_limit_after"] > cut["projected"]["concurrency_at_limit_before"]
    r = cut["replay"]
    assert r["changed"]["ttft_p99_s"] < 0.5 * r["baseline"]["ttft_p99_s"] and r["changed"]["completed"] == 16


def test_ample_memory_gets_no_kv_advice(tmp_path_factory):
    engine = EngineConfig(max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=4096)
    spec = SimSpec("llama-3.1-70b", "h100-80gb", 4, 0.9)
    advice = _advise(tmp_path_factory, "ample", long_requests(50, 0.5), spec, engine, model="llama-3.1-70b")
    assert not advice["diagnosis"]["kv_pressure"] and advice["diagnosis"]["preemptions"] == 0
    assert advice["verdicts"] == []
    assert Para(NO_CHANGE) in advice_blocks(Advice.from_json(advice))


def test_waiting_with_low_kv_usage_is_not_the_kv_cache(tmp_path_factory):
    engine = EngineConfig(max_model_len=8192, max_num_seqs=2, max_num_batched_tokens=4096)
    spec = SimSpec("llama-3.1-8b", "h100-80gb", 1, 0.9)
    advice = _advise(
        tmp_path_factory,
        "seqs",
        long_requests(40, 0.2, prompt=(200, 400), output=(100, 200)),
        spec,
        engine,
        model="llama-3.1-8b",
    )
    assert [v["action"] for v in advice["verdicts"]] == ["kv_not_bottleneck"]
    v = advice["verdicts"][0]
    assert v["verified"] and "max_num_seqs=2" in v["effect"]
    assert v["replay"]["changed"]["ttft_p99_s"] == pytest.approx(
        v["replay"]["baseline"]["ttft_p99_s"], rel=0.05
    )
    alt = v["alternatives"][0]
    assert alt["change"]["max_num_seqs"] == 8 and alt["shown"]


def test_timestamped_system_prompt_is_told_to_make_the_prefix_identical(tmp_path_factory):
    engine = EngineConfig(max_model_len=8192, max_num_seqs=64, max_num_batched_tokens=2048)
    spec = SimSpec("llama-3.1-8b", "h100-80gb", 1, 0.9)
    trace = shared_prefix_requests(80, 0.25, 1500)
    advice = _advise(tmp_path_factory, "stamp", trace, spec, engine, timestamped=True, model="llama-3.1-8b")
    v = _by_action(advice)["make_prefix_identical"]
    assert v["verified"], v["replay"]
    ev = v["evidence"]
    assert ev["identical_hit_ratio_possible"] < 0.05 < 0.8 < ev["near_identical_hit_ratio_possible"]
    assert ev["observed_hit_ratio"] == 0 and ev["differing_span_start_chars_p50"] < 10
    assert v["replay"]["changed"]["prefix_hit_ratio"] > 0.8 > v["replay"]["baseline"]["prefix_hit_ratio"]
    # The same workload with a byte-identical prefix: already cached, nothing to advise.
    same = _advise(tmp_path_factory, "same", trace, spec, engine, timestamped=False, model="llama-3.1-8b")
    assert "make_prefix_identical" not in _by_action(same)
    assert same["workload"]["prefixes"]["observed_hit_ratio"] > 0.8


def test_identical_prefixes_the_cache_does_not_hit_are_explained(tmp_path_factory):
    engine = EngineConfig(
        max_model_len=8192, max_num_seqs=64, max_num_batched_tokens=2048, enable_prefix_caching=False
    )
    spec = SimSpec("llama-3.1-8b", "h100-80gb", 1, 0.9)
    advice = _advise(
        tmp_path_factory,
        "nocache",
        shared_prefix_requests(40, 0.25, 1000),
        spec,
        engine,
        model="llama-3.1-8b",
    )
    assert "make_prefix_identical" not in _by_action(advice)
    assert "prefix_caching_off" in codes(advice["notes"]), advice["notes"]


def test_low_memory_utilisation_is_told_to_raise_it(tmp_path_factory):
    spec = SimSpec("llama-3.1-70b", "h100-80gb", 2, 0.88)
    engine = EngineConfig(max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=4096)
    advice = _advise(tmp_path_factory, "gmu", long_requests(30, 0.5), spec, engine, model="llama-3.1-70b")
    v = _by_action(advice)["raise_memory_utilization"]
    model, gpu = get_model("llama-3.1-70b"), get_gpu("h100-80gb")

    def at(u: float) -> int:
        return sizing.num_blocks(
            sizing.gpu_kv_budget_bytes(model, gpu, tp=2, utilisation=u), sizing.block_bytes(model, "auto", 2)
        )

    assert v["evidence"]["pool_blocks"] == at(0.88) and v["projected"]["pool_blocks"] == at(0.9)
    r = v["replay"]
    assert v["verified"] and r["changed"]["ttft_p99_s"] < 0.95 * r["baseline"]["ttft_p99_s"]


def test_real_engine_run_replays_on_its_own_pool_with_a_modelled_time_axis(tmp_path_factory):
    """A run of the bundled CPU engine (flags without --simulate): the replay keeps its
    48-block pool and says its time axis is modelled; fp8 is x4 over the fp32 CPU cache."""
    engine = EngineConfig(  # float32 pinned: `auto` is bfloat16 on a CPU with native bf16 matmul
        model="tiny-random", dtype="float32", num_blocks=48, max_num_seqs=16, max_num_batched_tokens=512
    )
    advice = _advise(
        tmp_path_factory,
        "real",
        long_requests(40, 0.05, prompt=(40, 80), output=(150, 250)),
        None,
        engine,
        model="tiny-random",
    )
    assert not advice["deployment"]["simulated"] and advice["deployment"]["num_blocks"] == 48
    assert advice["time_axis"].startswith("modelled: the run's 48-block pool")
    verdicts = _by_action(advice)
    q = verdicts["quantize_kv_cache"]
    assert q["evidence"]["bytes_per_element"] == 4 and q["projected"]["pool_blocks"] == 47 * 4 + 1
    assert q["verified"] and verdicts["add_memory"]["verified"]
    assert verdicts["add_memory"]["projected"]["option"].startswith("a KV pool of")
