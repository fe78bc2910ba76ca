"""Triton paged decode: one query token per sequence, split-KV ("flash-decoding").

Stage 1, grid `(num_seqs, num_kv_heads, NUM_SPLITS)`: a program takes every query head of
one KV head (the GQA group, padded to BLOCK_H >= 16 rows because that is the smallest M of
a tensor-core `tl.dot`) against one contiguous slice of the sequence's context, so each KV
tile is read once per group rather than once per query head. It writes the slice's
normalized output and its log-sum-exp (base 2) to fp32 scratch.
Stage 2, grid `(num_seqs, num_heads)`: merges the splits weighted by `exp2(lse - max)`.

Splitting the context is what keeps a small batch from leaving most SMs idle: with B * KVH
programs alone, batch 1 would run on a handful of SMs. A split with no tokens (a sequence
shorter than the others) reports lse ~ -1e30 and gets weight 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_engine.attention.kv_cache import LayerKVCache
from reference_engine.attention.metadata import AttentionMetadata
from reference_engine.attention.triton_paged_kv import (
    LOG2E,
    NEG_BIG,
    PagedKVArgs,
    dot_dtype,
    interpreting,
    kv_page_offsets,
    load_kv_tile,
)

_MAX_SPLITS = 32


@triton.jit
def _decode_split_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    k_scale_ptr,
    v_scale_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    q_start_ptr,
    part_out_ptr,
    part_lse_ptr,
    qk_scale,
    stride_qt,
    stride_qh,
    stride_bt,
    stride_page,
    stride_tok,
    stride_head,
    s_stride_page,
    s_stride_tok,
    s_stride_head,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    QUANT: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    token = tl.load(q_start_ptr + seq).to(tl.int64)

    rows = tl.arange(0, BLOCK_H)
    heads = kv_head * GROUP + rows
    row_mask = rows < GROUP
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    d_mask = offs_d < HEAD_DIM
    q = tl.load(
        q_ptr + token * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
        mask=row_mask[:, None] & d_mask[None, :],
        other=0.0,
    ).to(tl.float32)
    q = (q * qk_scale).to(DOT_DTYPE)

    tiles_per_split = tl.cdiv(tl.cdiv(seq_len, BLOCK_N), NUM_SPLITS)
    kv_start = split * tiles_per_split * BLOCK_N
    kv_end = tl.minimum(kv_start + tiles_per_split * BLOCK_N, seq_len)
    m = tl.full([BLOCK_H], NEG_BIG, tl.float32)
    denom = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, HEAD_DIM_PAD], tl.float32)
    table_row = block_tables_ptr + seq * stride_bt
    for start in range(kv_start, kv_end, BLOCK_N):
        kv_pos = start + tl.arange(0, BLOCK_N)
        kv_mask = kv_pos < kv_end
        page, in_page = kv_page_offsets(table_row, kv_pos, kv_mask, BLOCK_SIZE)
        k = load_kv_tile(
            k_ptr,
            k_scale_ptr,
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
            QUANT,
        )
        v = load_kv_tile(
            v_ptr,
            v_scale_ptr,
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
            QUANT,
        )
        scores = tl.dot(q, tl.trans(k.to(DOT_DTYPE)))
        scores = tl.where(kv_mask[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        p = tl.exp2(scores - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v.to(DOT_DTYPE))
        m = m_new

    # An empty split has denom 0: its lse stays ~NEG_BIG and its output 0.
    safe_denom = tl.maximum(denom, 1e-30)
    part = (seq * (GROUP * tl.num_programs(1)) + heads) * NUM_SPLITS + split
    tl.store(part_lse_ptr + part, m + tl.log2(safe_denom), mask=row_mask)
    tl.store(
        part_out_ptr + part[:, None] * HEAD_DIM_PAD + offs_d[None, :],
        acc / safe_denom[:, None],
        mask=row_mask[:, None],
    )


@triton.jit
def _decode_reduce_kernel(
    part_out_ptr,
    part_lse_ptr,
    out_ptr,
    q_start_ptr,
    stride_ot,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    part = (seq * tl.num_programs(1) + head) * NUM_SPLITS + tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    lse = tl.load(part_lse_ptr + part)
    weight = tl.exp2(lse - tl.max(lse, axis=0))
    parts = tl.load(part_out_ptr + part[:, None] * HEAD_DIM_PAD + offs_d[None, :])
    out = tl.sum(weight[:, None] * parts, axis=0) / tl.sum(weight, axis=0)
    token = tl.load(q_start_ptr + seq).to(tl.int64)
    tl.store(
        out_ptr + token * stride_ot + head * stride_oh + offs_d,
        out.to(out_ptr.dtype.element_ty),
        mask=offs_d < HEAD_DIM,
    )


def _num_splits(
    num_seqs: int, num_kv_heads: int, max_seq_len: int, block_n: int, device: torch.device
) -> int:
    """Enough stage-1 programs to fill the GPU about four times over, as a power of two.

    Powers of two bound how many kernel variants NUM_SPLITS compiles; no split is made
    smaller than one tile. Under the interpreter every program runs in turn, so one split.
    """
    if interpreting() or device.type != "cuda":
        return 1
    target = 4 * torch.cuda.get_device_properties(device).multi_processor_count
    wanted = triton.cdiv(target, num_seqs * num_kv_heads)
    most = triton.cdiv(max_seq_len, block_n)
    return min(triton.next_power_of_2(max(1, min(wanted, most))), _MAX_SPLITS)


def paged_decode(
    query: torch.Tensor,
    cache: LayerKVCache,
    meta: AttentionMetadata,
    scale: float,
    num_splits: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Attention of one query token per sequence, `query` `[T, num_heads, head_dim]` -> same shape.

    Sequence b's query is row `query_start_loc[b]`; rows past the batch stay zero.
    `num_splits` (rounded up to a power of two) and `block_n` override the heuristics.
    """
    kv = PagedKVArgs.of(cache)
    num_seqs, num_heads = meta.num_seqs, query.shape[1]
    group = num_heads // kv.num_kv_heads
    block_n = block_n or (64 if kv.head_dim_pad <= 64 else 32)
    splits = triton.next_power_of_2(
        num_splits or _num_splits(num_seqs, kv.num_kv_heads, meta.max_seq_len, block_n, query.device)
    )
    # Decode-only batches have query_start_loc = 0..B, so rows B.. are padding; zeroing just
    # those spares a memset of the whole output.
    out = torch.empty_like(query)
    out[num_seqs:].zero_()
    if num_seqs == 0:
        return out
    part_out = torch.empty(
        (num_seqs, num_heads, splits, kv.head_dim_pad), dtype=torch.float32, device=query.device
    )
    part_lse = torch.empty((num_seqs, num_heads, splits), dtype=torch.float32, device=query.device)
    _decode_split_kernel[(num_seqs, kv.num_kv_heads, splits)](
        query,
        *kv.tensors(),
        meta.block_tables,
        meta.seq_lens,
        meta.query_start_loc,
        part_out,
        part_lse,
        scale * LOG2E,
        query.stride(0),
        query.stride(1),
        meta.block_tables.stride(0),
        *kv.strides(),
        GROUP=group,
        HEAD_DIM=kv.head_dim,
        HEAD_DIM_PAD=kv.head_dim_pad,
        BLOCK_H=max(16, triton.next_power_of_2(group)),
        BLOCK_N=block_n,
        BLOCK_SIZE=kv.block_size,
        NUM_SPLITS=splits,
        QUANT=kv.quant,
        DOT_DTYPE=dot_dtype(query.dtype),
    )
    _decode_reduce_kernel[(num_seqs, num_heads)](
        part_out,
        part_lse,
        out,
        meta.query_start_loc,
        out.stride(0),
        out.stride(1),
        HEAD_DIM=kv.head_dim,
        HEAD_DIM_PAD=kv.head_dim_pad,
        NUM_SPLITS=splits,
    )
    return out
