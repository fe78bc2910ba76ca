"""The simulator's cost model: plausible step times, the decode/prefill regimes, monotonicity,
and a block count that is the sizing arithmetic's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.advisor import sizing
from reference_engine.catalogue import GPUS, MODELS, get_gpu, get_model
from reference_engine.config import ConfigError
from reference_engine.sim.cost_model import CostModel, Efficiency, simulated_num_blocks, step_time

H100 = get_gpu("h100-80gb")
LLAMA_70B = get_model("llama-3.1-70b")


@pytest.mark.parametrize("tp, batch", [(2, 1), (2, 8), (4, 1), (4, 16)])
def test_70b_decode_on_h100_takes_tens_of_milliseconds(tp, batch):
    t = step_time(LLAMA_70B, H100, [(1, 2_048)] * batch, tp=tp)
    assert 0.010 < t < 0.060
    assert CostModel(LLAMA_70B, H100, tp).step_cost([(1, 2_048)] * batch).bound == "memory"


def test_8b_decode_on_one_h100_matches_the_weight_read():
    t = step_time(get_model("llama-3.1-8b"), H100, [(1, 512)])
    assert 0.005 < t < 0.010  # 16 GB read at ~2.7 TB/s ~ 6 ms, plus a little fixed cost


def test_long_prefill_is_compute_bound():
    cost = CostModel(LLAMA_70B, H100, tp=2).step_cost([(8_192, 8_192)])
    assert cost.bound == "compute" and cost.compute_s > 10 * cost.memory_s
    assert 0.5 < cost.total_s < 3.0
    assert cost.total_s > 20 * step_time(LLAMA_70B, H100, [(1, 8_192)], tp=2)


MODEL_NAMES = ["llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-120b", "gemma-3-27b", "deepseek-v3", "mixtral-8x7b"]


def _fitting_tp(name: str) -> int:
    return {"deepseek-v3": 8, "gemma-3-27b": 1, "gpt-oss-120b": 1}.get(name, 2)


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(MODEL_NAMES),
    st.integers(1, 256),
    st.integers(1, 64),
    st.integers(1, 32_768),
    st.integers(1, 4_096),
)
def test_step_time_grows_with_batch_and_context(name, batch, more, context, extra):
    model = CostModel(get_model(name), H100, _fitting_tp(name))
    base = model.step_time([(1, context)] * batch)
    assert model.step_time([(1, context)] * (batch + more)) >= base
    assert model.step_time([(1, context + extra)] * batch) >= base
    assert model.step_time([(1 + extra, context + extra)] * batch) >= model.step_time(
        [(1, context + extra)] * batch
    )


def test_moe_reads_only_the_experts_its_tokens_touch():
    m = CostModel(get_model("qwen3-30b-a3b"), H100)
    one, many = m.step_cost([(1, 1_000)]), m.step_cost([(1, 1_000)] * 512)
    full = get_model("qwen3-30b-a3b").weight_bytes()
    assert one.bytes_read < 0.2 * full  # 8 of 128 experts
    assert many.bytes_read == pytest.approx(
        full + 512 * get_model("qwen3-30b-a3b").kv_bytes_for_tokens(1_000, 2), rel=0.01
    )  # every expert touched


def test_quantization_speeds_up_the_memory_bound_parts():
    long_ctx = [(1, 32_768)] * 32
    assert step_time(LLAMA_70B, H100, long_ctx, tp=4, kv_dtype="fp8") < step_time(
        LLAMA_70B, H100, long_ctx, tp=4
    )
    assert step_time(LLAMA_70B, H100, [(1, 100)], tp=2, weight_dtype="fp8") < step_time(
        LLAMA_70B, H100, [(1, 100)], tp=2
    )


def test_more_bandwidth_is_faster_decode():
    times = [
        step_time(get_model("llama-3.1-8b"), get_gpu(g), [(1, 1_000)])
        for g in ("l4", "a100-80gb", "h100-80gb", "h200-141gb", "b200")
    ]
    assert times == sorted(times, reverse=True)


def test_efficiency_and_overheads_are_stated_and_validated():
    eff = Efficiency()
    assert (eff.bandwidth, eff.compute, eff.step_overhead_s, eff.allreduce_s) == (0.8, 0.6, 0.5e-3, 10e-6)
    single = CostModel(get_model("llama-3.1-8b"), H100).step_cost([(1, 10)])
    assert single.overhead_s == 0.5e-3
    assert CostModel(LLAMA_70B, H100, 2).step_cost([(1, 10)]).overhead_s == pytest.approx(
        0.5e-3 + 160 * 10e-6
    )
    with pytest.raises(ConfigError, match="bandwidth efficiency"):
        Efficiency(bandwidth=1.2)


def test_bad_batches_and_configs():
    m = CostModel(get_model("qwen3-4b"), H100)
    assert m.step_time([]) == 0.0  # no step runs
    with pytest.raises(ConfigError, match="new tokens <= context"):
        m.step_time([(5, 3)])
    with pytest.raises(ConfigError, match="new tokens"):
        m.step_time([(0, 3)])
    with pytest.raises(ConfigError, match="9 attention heads"):
        CostModel(get_model("smollm2-135m"), H100, tp=2)
    with pytest.raises(ConfigError, match="unknown KV cache dtype"):
        CostModel(get_model("qwen3-4b"), H100, kv_dtype="fp4")


# --- the simulated pool is the sizing arithmetic's ----------------------------------------------


def test_llama_70b_on_h100_at_0_9():
    """tp=1 in bf16 (141 GB of weights on an 80 GB GPU) is refused, never silently quantized;
    tp=2 or fp8 weights give exactly the sizing arithmetic's block count."""
    with pytest.raises(ConfigError, match="tensor_parallel_size.*weight_dtype='fp8'"):
        simulated_num_blocks(LLAMA_70B, H100, tp=1, utilisation=0.9)
    for tp, weights in ((2, "auto"), (4, "auto"), (1, "fp8")):
        sim = simulated_num_blocks(LLAMA_70B, H100, tp, 0.9, "auto", 16, 8_192, weight_dtype=weights)
        plan = sizing.plan(LLAMA_70B, H100, tp=tp, weight_dtype=weights, max_model_len=8_192)
        assert abs(sim - plan.num_blocks) <= 1 and sim == plan.num_blocks


def test_max_model_len_must_fit_one_request():
    with pytest.raises(ConfigError, match="max_model_len 131,072"):
        simulated_num_blocks(LLAMA_70B, H100, tp=2, max_model_len=131_072)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(sorted(MODELS)),
    st.sampled_from(sorted(GPUS)),
    st.sampled_from([1, 2, 4, 8]),
    st.floats(0.5, 1.0),
    st.sampled_from(["auto", "fp8"]),
    st.sampled_from([16, 32]),
)
def test_simulated_blocks_equal_sizing_everywhere(name, gpu_name, tp, utilisation, kv_dtype, block_size):
    model, gpu = get_model(name), get_gpu(gpu_name)
    try:
        expected = sizing.plan(
            model,
            gpu,
            tp=tp,
            utilisation=utilisation,
            kv_dtype=kv_dtype,
            block_size=block_size,
            max_model_len=min(model.max_context, 4_096),
        ).num_blocks
    except sizing.SizingError:
        with pytest.raises(ConfigError):
            simulated_num_blocks(model, gpu, tp, utilisation, kv_dtype, block_size)
        return
    assert simulated_num_blocks(model, gpu, tp, utilisation, kv_dtype, block_size) == expected


def test_simulated_blocks_reject_bad_utilisation():
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        simulated_num_blocks(get_model("qwen3-4b"), H100, utilisation=1.2)
