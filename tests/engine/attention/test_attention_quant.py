"""KV cache formats: storage, quantization error, fp8 calibration, capacity, and config validation."""

from __future__ import annotations

import pytest
import torch

from reference_engine.attention import torch_backend
from reference_engine.attention.backend import (
    TorchAttentionBackend,
    TritonAttentionBackend,
    get_attention_backend,
    validate_attention_config,
)
from reference_engine.attention.kv_cache import allocate_kv_caches, copy_blocks, kv_cache_bytes_per_block
from reference_engine.attention.quantization import (
    FP8_HEADROOM,
    FP8_MAX,
    dequantize,
    fp8_scale_for,
    quantize_fp8,
    quantize_int8,
)
from reference_engine.config import ConfigError
from tests.engine.attention.batches import make_batch


@pytest.mark.parametrize(
    "kv_dtype,storage,scale_shape",
    [
        ("auto", torch.bfloat16, None),
        ("float32", torch.float32, None),
        ("float16", torch.float16, None),
        ("bfloat16", torch.bfloat16, None),
        ("fp8", torch.float8_e4m3fn, (1,)),
        ("int8", torch.int8, (5, 8, 2)),
    ],
)
def test_allocation_per_format(kv_dtype, storage, scale_shape):
    cache = allocate_kv_caches(2, 5, 8, 2, 16, "bfloat16", kv_cache_dtype=kv_dtype)[1]
    assert cache.key.dtype == cache.value.dtype == storage
    assert cache.key.shape == (5, 8, 2, 16)
    if scale_shape is None:
        assert cache.k_scale is None and cache.v_scale is None
    else:
        assert cache.k_scale.shape == cache.v_scale.shape == scale_shape


def test_int8_round_trip_within_half_a_step():
    x = torch.randn(64, 4, 32) * torch.logspace(-3, 3, 64)[:, None, None]
    x[0, 0] = 0.0
    q, scale = quantize_int8(x)
    assert scale.dtype == torch.float16 and scale.shape == (64, 4)
    err = (dequantize(q, scale) - x).abs()
    # Half a quantization step, plus the float16 rounding of the scale over 127 steps.
    bound = scale.float()[..., None] * (0.5 + 127 * 2**-11) + 1e-12
    assert (err <= bound).all()
    assert not dequantize(q, scale)[0, 0].any()


def test_fp8_round_trip_relative_error():
    x = torch.randn(4096) * 10
    scale = fp8_scale_for(x.abs().amax())
    y = dequantize(quantize_fp8(x, scale), scale)
    normal = x.abs() / scale >= 2**-6  # e4m3's smallest normal
    # 3 mantissa bits: round to nearest is within 2**-4 relative; subnormals within half their spacing.
    assert ((y - x).abs()[normal] <= x.abs()[normal] * 2**-4).all()
    assert ((y - x).abs()[~normal] <= scale * 2**-10).all()


def test_fp8_scales_calibrate_on_first_write_only():
    cache = allocate_kv_caches(1, 4, 8, 1, 16, torch.float32, kv_cache_dtype="fp8")[0]
    key, value = torch.randn(6, 1, 16), torch.randn(6, 1, 16) * 0.01
    key[0, 0, 3], value[1, 0, 0] = 10.0, -3.0
    key[5] = 1e6  # a padding row must not count
    slots = torch.tensor([8, 9, 10, 11, 12, -1])
    torch_backend.write_kv(key, value, cache, slots)
    assert cache.k_scale.item() == pytest.approx(10.0 * FP8_HEADROOM / FP8_MAX)
    assert cache.v_scale.item() == pytest.approx(3.0 * FP8_HEADROOM / FP8_MAX)
    torch_backend.write_kv(key[:1] * 100, value[:1], cache, torch.tensor([13]))
    assert cache.k_scale.item() == pytest.approx(10.0 * FP8_HEADROOM / FP8_MAX)
    # Past the headroom, values saturate at 448 * scale instead of becoming NaN.
    assert cache.key[1, 5, 0, 3].float().item() * cache.k_scale.item() == pytest.approx(
        FP8_MAX * cache.k_scale.item()
    )


def test_fp8_scale_floor_survives_a_zero_warmup():
    cache = allocate_kv_caches(1, 4, 8, 1, 16, torch.float32, kv_cache_dtype="fp8")[0]
    torch_backend.write_kv(torch.zeros(3, 1, 16), torch.zeros(3, 1, 16), cache, torch.tensor([8, 9, 10]))
    assert cache.k_scale.item() == pytest.approx(FP8_HEADROOM / FP8_MAX)


# Quantized vs full-precision KV on the torch path, fp32 queries, keys ~ N(0, 4), values ~ N(0, 1),
# head_dim 64 (|output| averages ~0.36). Bounds are about 1.6x the worst seen over seeds.
QUANT_ERROR_BOUND = {
    "int8": (0.006, 0.07),
    "fp8": (0.025, 0.35),
    "float16": (3e-4, 4e-3),
    "bfloat16": (2e-3, 3e-2),
}


@pytest.mark.parametrize("kv_dtype", list(QUANT_ERROR_BOUND))
def test_quantized_attention_error_is_bounded(kv_dtype):
    batch = make_batch([(40, 30), (0, 64), (69, 1)], 16, 2, 3, 64, "float32", seed=1)
    outs = []
    for fmt in ("float32", kv_dtype):
        cache = allocate_kv_caches(1, batch.num_blocks, 16, 2, 64, torch.float32, kv_cache_dtype=fmt)[0]
        torch_backend.write_kv(batch.prefix_key, batch.prefix_value, cache, batch.prefix_slots)
        torch_backend.write_kv(batch.key, batch.value, cache, batch.meta.slot_mapping)
        outs.append(torch_backend.paged_attention(batch.query, cache, batch.meta, 64**-0.5))
    err = (outs[1] - outs[0]).abs()
    mean_bound, max_bound = QUANT_ERROR_BOUND[kv_dtype]
    assert err.mean() <= mean_bound and err.max() <= max_bound


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("sixteen_bit", ["float16", "bfloat16", "auto"])
def test_eight_bit_kv_doubles_capacity_at_a_fixed_budget(head_dim, sixteen_bit):
    layers, block, kv_heads, model = 30, 16, 3, torch.bfloat16
    budget = 1 << 30
    blocks = {
        fmt: budget // kv_cache_bytes_per_block(layers, block, kv_heads, head_dim, fmt, model)
        for fmt in (sixteen_bit, "fp8", "int8")
    }
    assert blocks["fp8"] // 2 == blocks[sixteen_bit]  # exactly half the bytes; flooring may add one
    # int8 pays 2 bytes of float16 scale per token-head: 2 * D / (D + 2) = 1.94x at 64, 1.97x at 128.
    assert blocks["int8"] / blocks[sixteen_bit] == pytest.approx(2 * head_dim / (head_dim + 2), rel=1e-3)
    assert blocks["int8"] >= 1.9 * blocks[sixteen_bit]


@pytest.mark.parametrize("kv_dtype", ["auto", "float32", "float16", "fp8", "int8"])
def test_bytes_per_block_matches_allocation(kv_dtype):
    num_blocks, layers = 6, 2
    caches = allocate_kv_caches(layers, num_blocks, 8, 2, 32, "float16", kv_cache_dtype=kv_dtype)
    per_block = [
        t
        for c in caches
        for t in (c.key, c.value, c.k_scale, c.v_scale)
        if t is not None and t.shape[0] == num_blocks
    ]
    total = sum(t.nbytes for t in per_block)
    assert kv_cache_bytes_per_block(layers, 8, 2, 32, kv_dtype, "float16") * num_blocks == total


def test_copy_blocks_moves_int8_scales():
    cache = allocate_kv_caches(1, 4, 8, 1, 16, torch.float32, kv_cache_dtype="int8")[0]
    torch_backend.write_kv(torch.randn(8, 1, 16), torch.randn(8, 1, 16), cache, torch.arange(8, 16))
    copy_blocks([cache], [(1, 3)])
    for data, scale in ((cache.key, cache.k_scale), (cache.value, cache.v_scale)):
        assert torch.equal(data[3], data[1]) and torch.equal(scale[3], scale[1])


def test_backend_selection():
    assert isinstance(get_attention_backend("auto", "cpu"), TorchAttentionBackend)
    assert isinstance(get_attention_backend("auto", "cuda"), TritonAttentionBackend)
    assert isinstance(get_attention_backend("triton", "cpu"), TritonAttentionBackend)
    with pytest.raises(ConfigError, match="attention_backend"):
        get_attention_backend("flash", "cpu")


@pytest.mark.parametrize("backend", ["torch", "triton", TorchAttentionBackend(), TritonAttentionBackend()])
def test_valid_configs_pass(backend):
    validate_attention_config(backend, 16, 64, "fp8", "cpu")
    validate_attention_config(backend, 128, 80, "int8", "cpu")


@pytest.mark.parametrize(
    "args,message",
    [
        (("triton", 4, 64, "auto", "cpu"), "block sizes"),
        (("triton", 256, 64, "auto", "cpu"), "block sizes"),
        (("torch", 24, 64, "auto", "cpu"), "power of two"),
        (("triton", 16, 48, "auto", "cpu"), "head sizes"),
        (("triton", 16, 8, "auto", "cpu"), "head sizes"),
        (("torch", 16, 64, "fp4", "cpu"), "kv_cache_dtype"),
        (("tensorrt", 16, 64, "auto", "cpu"), "attention_backend"),
    ],
)
def test_bad_configs_raise(args, message):
    with pytest.raises(ConfigError, match=message):
        validate_attention_config(*args)


def test_torch_backend_takes_any_geometry():
    validate_attention_config("torch", 256, 48, "fp8", "cpu")


def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(ConfigError, match="CUDA device"):
        validate_attention_config("triton", 16, 64, "auto", "cpu")


@pytest.mark.parametrize("capability,ok", [((8, 0), False), ((8, 6), False), ((8, 9), True), ((9, 0), True)])
def test_fp8_needs_ada_or_newer_for_triton(monkeypatch, capability, ok):
    # No GPU here: stand in the capability query, the one CUDA call validation makes.
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    validate_attention_config("triton", 16, 64, "int8", "cuda")
    if ok:
        validate_attention_config("auto", 16, 64, "fp8", "cuda")
    else:
        with pytest.raises(ConfigError, match="compute capability"):
            validate_attention_config("auto", 16, 64, "fp8", "cuda")
