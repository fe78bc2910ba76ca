"""How the Triton attention kernels address and decode the paged KV cache.

Shared by the decode and prefill kernels so that both read the cache the same way:

* A KV tile is `BLOCK_N` consecutive token positions of one sequence. Each position is
  looked up through the block table on its own, so a tile may span several pages (block
  size < BLOCK_N) or part of one (block size > BLOCK_N): any power-of-two block size works
  with any tile size.
* Page numbers are widened to int64 before they are multiplied by the page stride:
  `num_blocks * block_size * num_kv_heads * head_dim` overflows int32 on large caches.
* Every loaded value is converted to fp32 and dequantized immediately. The interpreter
  silently computes garbage on bf16/fp8 arithmetic, and fp32 is the precision of the
  softmax anyway.
* Masked positions load as 0 so that a P @ V product never meets stale or NaN bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from reference_engine.attention.kv_cache import LayerKVCache
from reference_engine.attention.quantization import KVQuant

# Finite stand-in for -inf as the initial running max: exp2(m_old - m_new) stays 0 or 1
# instead of NaN while a row has seen no unmasked key yet (empty splits, padded rows).
NEG_BIG = tl.constexpr(-1.0e30)
LOG2E = 1.4426950408889634  # host side: the kernels work in base 2 (exp2 is the native instruction)


@triton.jit
def kv_page_offsets(block_table_row_ptr, kv_pos, kv_mask, BLOCK_SIZE: tl.constexpr):
    """(page id, slot in page), both int64, for token positions `kv_pos` of one sequence."""
    page = tl.load(block_table_row_ptr + kv_pos // BLOCK_SIZE, mask=kv_mask, other=0).to(tl.int64)
    return page, (kv_pos % BLOCK_SIZE).to(tl.int64)


@triton.jit
def load_kv_tile(
    data_ptr,
    scale_ptr,
    page,
    in_page,
    kv_mask,
    kv_head,
    offs_d,
    d_mask,
    stride_page,
    stride_tok,
    stride_head,
    s_stride_page,
    s_stride_tok,
    s_stride_head,
    QUANT: tl.constexpr,
):
    """A `[BLOCK_N, HEAD_DIM_PAD]` tile of one KV head, dequantized to fp32 (0 where masked)."""
    offs = (
        page[:, None] * stride_page + in_page[:, None] * stride_tok + kv_head * stride_head + offs_d[None, :]
    )
    x = tl.load(data_ptr + offs, mask=kv_mask[:, None] & d_mask[None, :], other=0.0).to(tl.float32)
    if QUANT == 1:
        x = x * tl.load(scale_ptr)
    elif QUANT == 2:
        s_offs = page * s_stride_page + in_page * s_stride_tok + kv_head * s_stride_head
        x = x * tl.load(scale_ptr + s_offs, mask=kv_mask, other=0.0).to(tl.float32)[:, None]
    return x


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def dot_dtype(query_dtype: torch.dtype) -> tl.dtype:
    """The operand dtype of `tl.dot`: the query's 16-bit type on tensor cores, else fp32.

    Accumulation is fp32 in every case. bf16 falls back to fp32 under the interpreter,
    which has no bf16 arithmetic; the interpreter multiplies fp16 operands with an fp32
    accumulator, so fp16 stays as is. fp32 operands run as TF32 on NVIDIA tensor cores
    (Triton's default), i.e. with fp16's 10-bit mantissa: a float32 model on a GPU gets
    attention as precise as an fp16 one, not bit-for-bit the torch path.
    """
    if query_dtype == torch.float16:
        return tl.float16
    if query_dtype == torch.bfloat16 and not interpreting():
        return tl.bfloat16
    return tl.float32


@dataclass(frozen=True, slots=True)
class PagedKVArgs:
    """The cache's launch arguments, in kernel order (K and V share one layout).

    For unquantized caches the scale pointers are the data tensors (never read: QUANT
    is 0) and the scale strides are 0.
    """

    key: torch.Tensor
    value: torch.Tensor
    k_scale: torch.Tensor
    v_scale: torch.Tensor
    stride_page: int
    stride_tok: int
    stride_head: int
    s_stride_page: int
    s_stride_tok: int
    s_stride_head: int
    quant: int
    block_size: int
    num_kv_heads: int
    head_dim: int

    @staticmethod
    def of(cache: LayerKVCache) -> PagedKVArgs:
        key, value = cache.key, cache.value
        assert key.stride() == value.stride() and key.stride(3) == 1, (
            "K and V must share a layout with unit head-dim stride"
        )
        quant = cache.quant
        k_scale = cache.k_scale if quant != KVQuant.NONE else key
        v_scale = cache.v_scale if quant != KVQuant.NONE else value
        s_strides = k_scale.stride() if quant == KVQuant.INT8_PER_TOKEN_HEAD else (0, 0, 0)
        return PagedKVArgs(
            key,
            value,
            k_scale,
            v_scale,
            *key.stride()[:3],
            *s_strides,
            int(quant),
            key.shape[1],
            key.shape[2],
            key.shape[3],
        )

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.key, self.value, self.k_scale, self.v_scale

    def strides(self) -> tuple[int, ...]:
        return (
            self.stride_page,
            self.stride_tok,
            self.stride_head,
            self.s_stride_page,
            self.s_stride_tok,
            self.s_stride_head,
        )

    @property
    def head_dim_pad(self) -> int:
        return triton.next_power_of_2(self.head_dim)
