"""Sizing arithmetic: the acceptance figures, vLLM's own logged numbers, and the block maths."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.advisor import sizing
from harness.advisor.sizing import SizingError
from reference_engine.catalogue import MODELS, get_gpu, get_model

GiB = 1 << 30


@pytest.mark.parametrize(
    "name, expected",
    [
        ("llama-3.1-70b", 327_680),
        ("qwen3-4b", 147_456),
        ("deepseek-v3", 70_272),
        ("llama-3.1-8b", 131_072),
        ("llama-3.1-405b", 516_096),
        ("qwen3-235b-a22b", 192_512),
        ("qwen2.5-7b", 57_344),
    ],
)
def test_bytes_per_token_and_8_bit_halves_them(name, expected):
    m = get_model(name)
    assert sizing.kv_bytes_per_token(m) == sizing.kv_bytes_per_token(m, "bf16") == expected
    assert sizing.kv_bytes_per_token(m, "fp8") * 2 == expected
    assert sizing.kv_bytes_per_token(m, "int8") * 2 == expected


def test_llama_70b_at_128k_is_40_gib():
    m = get_model("llama-3.1-70b")
    assert sizing.kv_bytes_for_context(m, 131_072) == 40 * GiB
    assert sizing.kv_bytes_for_context(m, 131_072, "fp8") == 20 * GiB


def test_tensor_parallel_splits_gqa_heads_and_replicates_mla():
    m = get_model("llama-3.1-70b")
    assert [sizing.kv_bytes_per_token_per_gpu(m, tp=tp) for tp in (1, 2, 4, 8)] == [
        327_680,
        163_840,
        81_920,
        40_960,
    ]
    assert sizing.kv_bytes_per_token_per_gpu(m, tp=16) == 40_960  # one KV head per rank, replicated
    assert sizing.kv_bytes_per_token_per_gpu(get_model("deepseek-v3"), tp=8) == 70_272  # latent kept whole
    with pytest.raises(SizingError, match="9 attention heads"):
        sizing.kv_bytes_per_token_per_gpu(get_model("smollm2-135m"), tp=2)


def test_sliding_window_layers_are_capped_at_the_window():
    oss = get_model("gpt-oss-120b")  # 18 full + 18 sliding(128) layers, 8 KV heads x 64 x 2 B
    per_layer = 2 * 8 * 64 * 2
    assert sizing.kv_bytes_per_token(oss) == 36 * per_layer == 73_728  # all-full accounting
    assert sizing.kv_bytes_per_token_at(oss, 100) == 73_728  # inside the window nothing is dropped
    assert sizing.kv_bytes_for_context(oss, 131_072) == per_layer * (18 * 131_072 + 18 * 128)
    assert sizing.kv_bytes_per_token_at(oss, 131_072) == pytest.approx(
        36_864, rel=0.001
    )  # ~ full layers only
    gemma = get_model("gemma-3-27b")  # 10 global layers (80 KiB/token) + 52 local ones capped at 1,024
    assert sizing.kv_bytes_per_token_at(gemma, 131_072) == 8_192 * (10 + 52 * 1_024 / 131_072)
    assert sizing.kv_bytes_per_token(gemma) == 62 * 8_192  # 496 KiB if every layer were global


# --- vLLM's own figures -------------------------------------------------------------------------


def test_reproduces_vllm_fp8_doc_qwen3_4b_on_l4():
    """vllm-project/vllm docs/features/quantization/quantized_kvcache.md (vLLM 0.25.1, L4, Qwen3-4B,
    max-model-len 32768, 'Available KV cache memory' 11.47 GiB): auto 83,488 tokens / 2.55x,
    fp8 166,992 tokens / 5.10x.
    The GiB figure is logged to 2 decimals (+-0.005 GiB = +-0.044%), hence 0.1% tolerance."""
    m, l4 = get_model("qwen3-4b"), get_gpu("l4")
    auto = sizing.plan(m, l4, kv_budget=round(11.47 * GiB), max_model_len=32_768)
    fp8 = sizing.plan(m, l4, kv_budget=round(11.47 * GiB), max_model_len=32_768, kv_dtype="fp8")
    assert auto.token_capacity == pytest.approx(83_488, rel=0.001)
    assert fp8.token_capacity == pytest.approx(166_992, rel=0.001)
    assert round(auto.vllm_max_concurrency, 2) == pytest.approx(2.55, abs=0.01)
    assert round(fp8.vllm_max_concurrency, 2) == pytest.approx(5.10, abs=0.01)


def test_reproduces_vllm_issue_12330_llama_3_8b_on_a100_40gb():
    """vllm#12330 log: total_gpu_memory (39.50GiB) x gpu_memory_utilization (0.90) = 35.55GiB; model
    weights take 14.96GiB; non_torch_memory 0.10GiB; activation peak 9.37GiB; KV 11.12GiB;
    '# GPU blocks: 5691'. Same budget formula, same block maths: within 0.1%."""
    m = get_model("llama-3.1-8b")  # Llama-3-8B and 3.1-8B share every shape
    assert m.weight_bytes() / 1e9 == pytest.approx(
        14.9595 * 2**30 / 1e9, rel=0.001
    )  # "took 14.9595 GB" (GiB)
    budget = sizing.kv_budget_bytes(
        round(39.50 * GiB), round(14.96 * GiB), utilisation=0.90, overhead_bytes=round((0.10 + 9.37) * GiB)
    )
    assert budget / GiB == pytest.approx(11.12, abs=0.005)
    assert sizing.num_blocks(budget, sizing.block_bytes(m)) == pytest.approx(5_691, rel=0.001)


def test_reproduces_vllm_issue_10517_llama_3_1_8b_on_rtx_3090():
    """vllm#10517 log: kv_cache_size=3.81GiB -> '# GPU blocks: 1952' (Llama-3.1-8B, 20k max len)."""
    blocks = sizing.num_blocks(round(3.81 * GiB), sizing.block_bytes(get_model("llama-3.1-8b")))
    assert blocks == pytest.approx(1_952, rel=0.002)


def test_default_prediction_for_llama_8b_on_h100_is_in_the_logged_range():
    """H100 logs for Llama-3.1-8B at 0.9 show 54.4-54.9 GiB of KV (~445k-450k tokens); the default
    2 GiB overhead is deliberately on the safe side of that."""
    p = sizing.plan(get_model("llama-3.1-8b"), get_gpu("h100-80gb"), max_model_len=131_072)
    assert 53 * GiB < p.kv_budget_bytes < 55 * GiB
    assert 420_000 < p.token_capacity < 450_000
    assert 3.1 < p.vllm_max_concurrency < 3.5


# --- budget errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("utilisation", [0, -0.1, 1.01, 1.5])
def test_utilisation_outside_0_1_is_an_error(utilisation):
    with pytest.raises(SizingError, match=r"utilisation must be in \(0, 1\]"):
        sizing.kv_budget_bytes(80 * GiB, 10 * GiB, utilisation=utilisation)


def test_utilisation_of_one_is_allowed():
    assert sizing.kv_budget_bytes(80 * GiB, 10 * GiB, utilisation=1.0, overhead_bytes=0) == 70 * GiB


def test_weights_larger_than_the_gpu_are_an_error():
    with pytest.raises(SizingError, match="larger than one h100-80gb.*tensor-parallel-size.*fp8"):
        sizing.gpu_kv_budget_bytes(get_model("llama-3.1-70b"), get_gpu("h100-80gb"))
    with pytest.raises(SizingError, match="no memory left for the KV cache"):
        sizing.gpu_kv_budget_bytes(
            get_model("qwen3-32b"), get_gpu("rtx-4090"), weight_dtype="int4", utilisation=0.5
        )
    fp8 = sizing.gpu_kv_budget_bytes(get_model("llama-3.1-70b"), get_gpu("h100-80gb"), weight_dtype="fp8")
    assert 2 * GiB < fp8 < 6 * GiB  # fits, with little room left for the cache


def test_plan_input_errors():
    m, gpu = get_model("llama-3.1-8b"), get_gpu("h100-80gb")
    with pytest.raises(SizingError, match="exceed max model len"):
        sizing.plan(m, gpu, max_model_len=4096, context_tokens=8192)
    with pytest.raises(SizingError, match="exceeds llama-3.1-8b's context"):
        sizing.plan(m, gpu, max_model_len=1_000_000)
    with pytest.raises(SizingError, match="--sharing-requests"):
        sizing.plan(m, gpu, shared_prefix_tokens=100)
    with pytest.raises(SizingError, match="longer than the context"):
        sizing.plan(m, gpu, context_tokens=100, shared_prefix_tokens=200, sharing_requests=2)
    with pytest.raises(SizingError, match="block size"):
        sizing.plan(m, gpu, block_size=0)
    with pytest.raises(SizingError, match="concurrency"):
        sizing.plan(m, gpu, concurrency=0)


def test_a_given_kv_budget_bypasses_the_weights():
    p = sizing.plan(get_model("llama-3.1-70b"), get_gpu("h100-80gb"), kv_budget=10 * GiB, max_model_len=8192)
    assert p.budget_given and p.num_blocks == 10 * GiB // (16 * 327_680)


# --- blocks, reservations, concurrency ----------------------------------------------------------


def test_blocks_and_last_block_slack():
    assert [sizing.blocks_for_tokens(t) for t in (1, 15, 16, 17, 32, 33)] == [1, 1, 1, 2, 2, 3]
    assert [sizing.last_block_slack(t) for t in (1, 15, 16, 17)] == [15, 1, 0, 15]


@given(st.integers(1, 10**6), st.sampled_from([1, 8, 16, 32, 128]))
def test_slack_is_always_below_one_block(tokens, block_size):
    slack = sizing.last_block_slack(tokens, block_size)
    assert 0 <= slack < block_size
    assert sizing.blocks_for_tokens(tokens, block_size) * block_size - slack == tokens


def test_contiguous_versus_paged_for_llama_8b_on_h100():
    p = sizing.plan(
        get_model("llama-3.1-8b"),
        get_gpu("h100-80gb"),
        max_model_len=131_072,
        context_tokens=2_000,
        concurrency=64,
    )
    assert p.reserved_bytes_per_request == 16 * GiB and p.used_bytes_per_request == 2_000 * 131_072
    assert p.idle_share == pytest.approx(1 - 2_000 / 131_072)
    assert p.blocks_per_request == 125 and p.last_block_slack == 0 and p.max_last_block_slack == 15
    assert p.fit_contiguous == p.kv_budget_bytes // (16 * GiB) == 3
    assert p.fit_paged == p.num_blocks // 125
    assert (p.fits_contiguous, p.fits_paged) == (False, True)


@given(st.sampled_from(sorted(MODELS)), st.integers(1, 32_768), st.sampled_from(["auto", "fp8"]))
def test_paging_never_fits_fewer_requests_than_reserving(name, context, kv_dtype):
    m = get_model(name)
    max_len = min(m.max_context, 32_768)
    context = min(context, max_len)
    p = sizing.plan(
        m,
        get_gpu("h100-80gb"),
        kv_budget=20 * GiB,
        max_model_len=max_len,
        context_tokens=context,
        kv_dtype=kv_dtype,
    )
    assert p.fit_paged >= p.fit_contiguous
    assert p.used_bytes_per_request <= p.paged_bytes_per_request <= p.used_bytes_per_request + p.block_bytes
    assert 0 <= p.idle_share < 1


def test_longest_request_that_fits():
    m = get_model("llama-3.1-70b")
    p = sizing.plan(m, get_gpu("h100-80gb"), tp=2, max_model_len=131_072)
    assert p.fit_contiguous == 0 and p.vllm_max_concurrency < 1
    pool = p.num_blocks * p.block_bytes
    longest = p.max_model_len_that_fits
    assert (
        sizing.paged_request_bytes(m, longest, tp=2)
        <= pool
        < sizing.paged_request_bytes(m, longest + 1, tp=2)
    )


# --- prefix sharing -----------------------------------------------------------------------------


def test_prefix_sharing_counts_full_blocks_only():
    s = sizing.prefix_sharing(1_000, 64, bytes_per_token=131_072, block_size=16)
    assert s.blocks_shared == 62  # floor(1000 / 16); the 8-token tail is per request
    assert s.bytes_separate == 64 * 1_000 * 131_072
    assert s.bytes_shared == (62 * 16 + 64 * 8) * 131_072
    assert s.bytes_saved == 63 * 62 * 16 * 131_072 and s.blocks_saved == 63 * 62
    assert sizing.prefix_sharing(15, 10, 100).bytes_saved == 0  # shorter than a block: nothing shareable
    assert sizing.prefix_sharing(1_024, 1, 100).bytes_saved == 0  # one request shares with nobody


def test_plan_reports_prefix_sharing_per_gpu():
    p = sizing.plan(
        get_model("llama-3.1-70b"),
        get_gpu("h100-80gb"),
        tp=4,
        max_model_len=32_768,
        context_tokens=4_096,
        concurrency=32,
        shared_prefix_tokens=2_048,
    )
    assert p.prefix is not None and p.prefix.requests == 32  # falls back to --concurrency
    assert p.prefix.bytes_saved == 31 * 128 * 16 * 81_920
