"""Triton cache write: scatter a step's new K/V rows into their paged slots, quantizing on store.

Grid `(num_tokens, cdiv(num_kv_heads, HEAD_TILE))`: one program stores a tile of whole
heads of one token, so the int8 per-token-head absmax is a reduction inside the program.
Slot -1 marks padding and is skipped. The result is bit-identical to `torch_backend.write_kv`
(the fp8 per-tensor scales are calibrated by the same torch code before the launch).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_engine.attention.kv_cache import LayerKVCache, calibrate_fp8_scales
from reference_engine.attention.quantization import (
    FP8_MAX,
    INT8_MAX,
    INT8_MIN_DIVISOR,
    KVQuant,
)
from reference_engine.attention.triton_paged_kv import PagedKVArgs

_FP8_MAX = tl.constexpr(FP8_MAX)
_INT8_MAX = tl.constexpr(INT8_MAX)
_INT8_MIN_DIV = tl.constexpr(INT8_MIN_DIVISOR)
# 1.5 * 2**23: adding it leaves no fraction bits in an fp32, so the FPU's own
# round-to-nearest-even does the rounding (exact for |x| < 2**22).
_RNE_MAGIC = tl.constexpr(12582912.0)


@triton.jit
def _round_half_even(x):
    return (x + _RNE_MAGIC) - _RNE_MAGIC


@triton.jit
def _round_to_e4m3(x):
    """Round fp32 `x` (|x| <= 448) to the nearest e4m3 value, ties to even, keeping the sign.

    The cast that follows is then exact. Rounding first matters: Triton's interpreter
    drops the carry when a mantissa rounds up into the next binade (7.94 -> 4.0).
    """
    bits = x.to(tl.int32, bitcast=True)
    # e4m3 has 3 mantissa bits; below its smallest normal (2**-6) the spacing stays 2**-9.
    exponent = tl.maximum(((bits >> 23) & 0xFF) - 127, -6)
    # Scaling by exact powers of two (built from their bits) keeps every step exact.
    ulp = ((exponent - 3 + 127) << 23).to(tl.float32, bitcast=True)
    inv_ulp = ((127 - exponent + 3) << 23).to(tl.float32, bitcast=True)
    magnitude = _round_half_even(tl.abs(x) * inv_ulp) * ulp
    return tl.where(bits < 0, -magnitude, magnitude)


@triton.jit
def _round_to_bf16(x):
    """Round fp32 `x` to the nearest bfloat16, ties to even (the interpreter's cast truncates)."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _quantize_store(
    src_ptr,
    src_offs,
    dst_ptr,
    dst_offs,
    scale_ptr,
    scale_offs,
    head_mask,
    mask,
    QUANT: tl.constexpr,
):
    # Divisions are IEEE-rounded (div_rn): the GPU's default fp32 division is approximate and
    # could round a value to the other side of a quantization step than torch does.
    x = tl.load(src_ptr + src_offs, mask=mask, other=0.0).to(tl.float32)
    if QUANT == 1:
        x = _round_to_e4m3(tl.minimum(tl.maximum(tl.math.div_rn(x, tl.load(scale_ptr)), -_FP8_MAX), _FP8_MAX))
    elif QUANT == 2:
        # The scale is rounded to its float16 storage first and the values are divided by
        # the rounded scale, so that dequantization inverts exactly what is stored.
        scale = tl.math.div_rn(tl.max(tl.abs(x), axis=1), _INT8_MAX).to(tl.float16)
        tl.store(scale_ptr + scale_offs, scale, mask=head_mask)
        divisor = tl.maximum(scale.to(tl.float32), _INT8_MIN_DIV)
        x = _round_half_even(
            tl.minimum(tl.maximum(tl.math.div_rn(x, divisor[:, None]), -_INT8_MAX), _INT8_MAX)
        )
    elif dst_ptr.dtype.element_ty == tl.bfloat16:
        x = _round_to_bf16(x)
    tl.store(dst_ptr + dst_offs, x.to(dst_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _write_kv_kernel(
    key_ptr,
    value_ptr,
    k_cache_ptr,
    v_cache_ptr,
    k_scale_ptr,
    v_scale_ptr,
    slot_mapping_ptr,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_page,
    stride_tok,
    stride_head,
    s_stride_page,
    s_stride_tok,
    s_stride_head,
    num_kv_heads,
    BLOCK_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    HEAD_TILE: tl.constexpr,
    QUANT: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot < 0:
        return
    page = slot // BLOCK_SIZE
    in_page = slot % BLOCK_SIZE
    heads = tl.program_id(1) * HEAD_TILE + tl.arange(0, HEAD_TILE)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    head_mask = heads < num_kv_heads
    mask = head_mask[:, None] & (offs_d < HEAD_DIM)[None, :]
    dst_offs = page * stride_page + in_page * stride_tok + heads[:, None] * stride_head + offs_d[None, :]
    scale_offs = page * s_stride_page + in_page * s_stride_tok + heads * s_stride_head
    _quantize_store(
        key_ptr,
        token * stride_kt + heads[:, None] * stride_kh + offs_d[None, :],
        k_cache_ptr,
        dst_offs,
        k_scale_ptr,
        scale_offs,
        head_mask,
        mask,
        QUANT,
    )
    _quantize_store(
        value_ptr,
        token * stride_vt + heads[:, None] * stride_vh + offs_d[None, :],
        v_cache_ptr,
        dst_offs,
        v_scale_ptr,
        scale_offs,
        head_mask,
        mask,
        QUANT,
    )


def triton_write_kv(
    key: torch.Tensor, value: torch.Tensor, cache: LayerKVCache, slot_mapping: torch.Tensor
) -> None:
    """Same contract as `torch_backend.write_kv`: `key`/`value` `[T, num_kv_heads, head_dim]`,
    slot -1 = padding."""
    num_tokens = key.shape[0]
    if num_tokens == 0:
        return
    if cache.quant == KVQuant.FP8_PER_TENSOR:
        calibrate_fp8_scales(cache, key, value, slot_mapping)
    assert key.stride(2) == 1 and value.stride(2) == 1, "head_dim must be contiguous"
    kv = PagedKVArgs.of(cache)
    head_tile = min(triton.next_power_of_2(kv.num_kv_heads), max(1, 1024 // kv.head_dim_pad))
    grid = (num_tokens, triton.cdiv(kv.num_kv_heads, head_tile))
    _write_kv_kernel[grid](
        key,
        value,
        *kv.tensors(),
        slot_mapping,
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        *kv.strides(),
        kv.num_kv_heads,
        BLOCK_SIZE=kv.block_size,
        HEAD_DIM=kv.head_dim,
        HEAD_DIM_PAD=kv.head_dim_pad,
        HEAD_TILE=head_tile,
        QUANT=kv.quant,
    )
