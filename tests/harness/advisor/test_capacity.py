"""Pool arithmetic of changed deployments and the "more memory" options (all from sizing)."""

from __future__ import annotations

import math
from dataclasses import asdict

import pandas as pd
import pytest

from harness.advisor import capacity, sizing
from harness.advisor.deployment import Deployment
from harness.advisor.evidence import WorkloadEvidence
from harness.advisor.run_inputs import from_frames
from harness.advisor.whatif import Change, make_replayer
from harness.bundle.deployment import BUNDLED, of_config
from reference_engine.catalogue import get_gpu, get_model
from reference_engine.config import EngineConfig
from reference_engine.model_dtype import resolve_model_dtype
from reference_engine.sim.spec import SimSpec


def dep(**kw) -> Deployment:
    base = dict(
        engine=EngineConfig(max_model_len=8192),
        bundled=True,
        simulated=True,
        model="llama-3.1-70b",
        gpu="h100-80gb",
        tp=2,
        gpu_memory_utilization=0.9,
        num_blocks=None,
        max_model_len=8192,
    )
    return Deployment(**{**base, **kw})


def llama70_tp2_run() -> dict:
    """run.json of `kvscope run --simulate --sim-model llama-3.1-70b --tensor-parallel-size 2
    --max-model-len 8192 --model llama-3.1-70b`: the configuration it records."""
    engine = EngineConfig(model="llama-3.1-70b", max_model_len=8192)
    spec = SimSpec("llama-3.1-70b", tensor_parallel_size=2)
    facts = of_config("bundled simulator", asdict(engine), asdict(spec), BUNDLED)
    return {"bundled_engine": True, "config": {"model": "llama-3.1-70b"}, "deployment": facts.to_json()}


def blocks(model, gpu, tp, kv="auto", u=0.9):
    m, g = get_model(model), get_gpu(gpu)
    return sizing.num_blocks(
        sizing.gpu_kv_budget_bytes(m, g, tp=tp, utilisation=u), sizing.block_bytes(m, kv, tp)
    )


def test_changed_pools_are_the_sizing_arithmetic():
    d = dep()
    assert capacity.base_blocks(d) == blocks("llama-3.1-70b", "h100-80gb", 2) == 1445
    assert capacity.changed_blocks(d, kv_dtype="fp8") == blocks("llama-3.1-70b", "h100-80gb", 2, "fp8")
    assert capacity.changed_blocks(d, tp=4) == blocks("llama-3.1-70b", "h100-80gb", 4)
    assert capacity.changed_blocks(d, gpu="h200-141gb") == blocks("llama-3.1-70b", "h200-141gb", 2)


def test_an_observed_pool_is_scaled_by_the_arithmetic_ratio():
    d = dep(num_blocks=1000)  # e.g. a real server whose profiling left fewer blocks than the formula
    assert capacity.changed_blocks(d, kv_dtype="fp8") == round(1000 * 2890 / 1445)


def cpu_engine(**config) -> Deployment:
    return Deployment(
        EngineConfig(model="tiny-random", num_blocks=48, **config), True, False, None, None, num_blocks=48
    )


def test_cpu_engine_quantization_scales_by_element_size():
    d = cpu_engine(dtype="float32")
    assert d.kv_dtype == "float32" and capacity.changed_blocks(d, kv_dtype="fp8") == 47 * 4 + 1
    assert capacity.memory_options(d, 100)[0].num_blocks == math.ceil(100 * 1.01) + 1
    # The cache's `auto` is the engine's compute dtype: bfloat16 halves what fp8 gains.
    d = cpu_engine(dtype="bfloat16")
    assert d.kv_dtype == "bfloat16" and capacity.changed_blocks(d, kv_dtype="fp8") == 47 * 2 + 1


def test_cpu_engine_auto_dtype_is_what_this_machine_resolves():
    expected = resolve_model_dtype("auto", "cpu")  # float32 under the default fp16 weights
    assert cpu_engine().kv_dtype == expected
    assert cpu_engine(kv_cache_dtype="int8").kv_dtype == "int8"  # an explicit cache dtype wins


def test_memory_options_hold_the_demand_and_come_cheapest_first():
    d, demand = dep(), 5036
    options = capacity.memory_options(d, demand)
    kinds = [o.kind for o in options]
    assert set(kinds) == {"tensor_parallel", "larger_gpu", "replicas"}
    assert [o.total_memory_gib for o in options] == sorted(o.total_memory_gib for o in options)
    for o in options:
        assert o.num_blocks * (o.replicas if o.kind == "replicas" else 1) >= demand
    replicas = next(o for o in options if o.kind == "replicas")
    assert (
        replicas.replicas == math.ceil((math.ceil(demand * 1.01) + 1) / 1445)
        and replicas.gpus == 2 * replicas.replicas
    )


def test_replicas_split_the_trace_round_robin():
    n = 12
    requests = pd.DataFrame(
        {
            "send_time_unix": [100.0 + i for i in range(n)],
            "prompt_tokens": [500] * n,
            "output_tokens": [20] * n,
            "ok": [True] * n,
        }
    )
    server = pd.DataFrame(
        {"time_unix": [100.0], "kv_capacity_blocks": [1445.0], "kv_block_size_tokens": [16.0]}
    )
    run = llama70_tp2_run()
    inputs = from_frames(run, requests, server)
    replayer = make_replayer(inputs, WorkloadEvidence(None, None))
    one, three = replayer.run(Change("as run")), replayer.run(Change("3 replicas", replicas=3))
    assert one.completed == three.completed == n and three.num_blocks == one.num_blocks == 1445
    assert three.max_running <= math.ceil(n / 3)
    with pytest.raises(ValueError):
        make_replayer(
            from_frames({"target": "http://x"}, requests, server.drop(columns="kv_capacity_blocks")),
            WorkloadEvidence(None, None),
        )


def test_requests_that_failed_mid_way_are_replayed_at_their_target_lengths():
    requests = pd.DataFrame(
        {
            "send_time_unix": [10.0, 11.0, 12.0],
            "prompt_tokens": [300, None, None],
            "output_tokens": [20, None, None],
            "target_prompt_tokens": [300, 400, 500],
            "target_output_tokens": [20, 30, 40],
            "ok": [True, False, False],
            "error_class": [None, "timeout", "connect_error"],
        }
    )
    server = pd.DataFrame({"time_unix": [10.0], "kv_capacity_blocks": [1445.0]})
    run = llama70_tp2_run()
    replayer = make_replayer(from_frames(run, requests, server), WorkloadEvidence(None, None))
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in replayer.trace] == [
        (0.0, 300, 20),
        (1.0, 400, 30),
    ]
    assert replayer.excluded == 1 and "failed mid-way" in replayer.time_axis
