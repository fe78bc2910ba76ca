"""Triton paged prefill: varlen query chunks over their cached prefix plus causally within the chunk.

This one kernel serves prefill, chunked prefill, prefix-cache hits and mixed batches (a
decode is a chunk of one): the chunk's own K/V are written to the cache first, so "prefix"
and "chunk" are just positions `< context_len` and `>= context_len` of the same paged
sequence, where `context_len = seq_len - query_len`.

Tile: BLOCK_Q query tokens x the GROUP query heads of one KV head, packed as the
BLOCK_M = BLOCK_Q * GROUP (padded) rows of `tl.dot` (row r is token r // GROUP, head
r % GROUP), so GQA groups share each KV tile load.

Grid `(num_tokens // BLOCK_Q + num_seqs, num_kv_heads)` is static: it depends on shapes
alone, so launching needs no device-to-host sync (and could be graph-captured). Sequence
b's Q-blocks are numbered from `query_start_loc[b] // BLOCK_Q + b`; that leaves every
sequence at least `cdiv(query_len, BLOCK_Q)` numbers, and a program finds its sequence by
binary search over `query_start_loc`. Programs with no rows left return at once.
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


@triton.jit
def _find_seq(q_start_ptr, q_block, num_seqs, BLOCK_Q: tl.constexpr):
    """The last sequence b whose first Q-block number `query_start_loc[b] // BLOCK_Q + b` is <= q_block."""
    # Annotated so the loop-carried values are int32 from the start (the compiler requires
    # a loop variable to keep one type).
    lo: tl.int32 = 0
    hi: tl.int32 = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        if tl.load(q_start_ptr + mid) // BLOCK_Q + mid <= q_block:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit
def _prefill_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    k_scale_ptr,
    v_scale_ptr,
    out_ptr,
    block_tables_ptr,
    seq_lens_ptr,
    q_start_ptr,
    qk_scale,
    num_seqs,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
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
    BLOCK_M: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    QUANT: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    q_block = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = _find_seq(q_start_ptr, q_block, num_seqs, BLOCK_Q)
    q_start = tl.load(q_start_ptr + seq)
    q_len = tl.load(q_start_ptr + seq + 1) - q_start
    first_tok = (q_block - (q_start // BLOCK_Q + seq)) * BLOCK_Q
    if first_tok >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    context_len = seq_len - q_len

    rows = tl.arange(0, BLOCK_M)
    tok = first_tok + rows // GROUP
    heads = kv_head * GROUP + rows % GROUP
    row_mask = (rows < BLOCK_Q * GROUP) & (tok < q_len)
    q_pos = context_len + tok
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    d_mask = offs_d < HEAD_DIM
    row_tok = (q_start + tok).to(tl.int64)
    io_mask = row_mask[:, None] & d_mask[None, :]
    q = tl.load(
        q_ptr + row_tok[:, None] * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
        mask=io_mask,
        other=0.0,
    ).to(tl.float32)
    q = (q * qk_scale).to(DOT_DTYPE)

    m = tl.full([BLOCK_M], NEG_BIG, tl.float32)
    denom = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], tl.float32)
    table_row = block_tables_ptr + seq * stride_bt
    # Keys past the tile's last query position are masked for every row: stop there.
    kv_end = tl.minimum(context_len + first_tok + BLOCK_Q, seq_len)
    for start in range(0, kv_end, BLOCK_N):
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
        visible = kv_mask[None, :] & (kv_pos[None, :] <= q_pos[:, None])
        scores = tl.where(visible, scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=1))
        p = tl.exp2(scores - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        denom = denom * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(DOT_DTYPE), v.to(DOT_DTYPE))
        m = m_new

    # Every row sees key 0, so denom >= 1 on the rows that are stored.
    out = acc / tl.maximum(denom, 1.0)[:, None]
    tl.store(
        out_ptr + row_tok[:, None] * stride_ot + heads[:, None] * stride_oh + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=io_mask,
    )


def _block_m(group: int, max_query_len: int) -> int:
    """Rows per tile: 16 (the smallest tensor-core M) for short chunks, 64 for long ones.

    Short chunks (decodes in a mixed batch) would waste most of a large tile; long
    prefills need the larger tile to reuse each K/V load across more queries. Under the
    interpreter the larger tile is also faster (fewer, wider numpy steps).
    """
    rows = max(16, triton.next_power_of_2(group))
    if max_query_len * group >= 64 or interpreting():
        rows = max(rows, 64)
    return rows


def paged_prefill(
    query: torch.Tensor,
    cache: LayerKVCache,
    meta: AttentionMetadata,
    scale: float,
    block_m: int | None = None,
    block_n: int | None = None,
) -> torch.Tensor:
    """Causal attention of every query row over its paged context, `[T, num_heads, head_dim]` -> same shape.

    Rows past `query_start_loc[-1]` (padding) stay zero. `block_m` (>= 16 and a power of
    two) and `block_n` (>= 16) override the tile heuristics.
    """
    kv = PagedKVArgs.of(cache)
    num_tokens, num_heads = query.shape[:2]
    group = num_heads // kv.num_kv_heads
    block_m = block_m or _block_m(group, meta.max_query_len)
    assert block_m >= group, "a tile must hold a whole GQA group"
    block_q = block_m // group
    block_n = block_n or (32 if kv.head_dim_pad >= 128 else 64)
    out = torch.empty_like(query)
    out[sum(meta.query_lens_host) :].zero_()  # padding rows, which no program writes
    if meta.num_seqs == 0:
        return out
    grid = (num_tokens // block_q + meta.num_seqs, kv.num_kv_heads)
    _prefill_kernel[grid](
        query,
        *kv.tensors(),
        out,
        meta.block_tables,
        meta.seq_lens,
        meta.query_start_loc,
        scale * LOG2E,
        meta.num_seqs,
        query.stride(0),
        query.stride(1),
        out.stride(0),
        out.stride(1),
        meta.block_tables.stride(0),
        *kv.strides(),
        GROUP=group,
        HEAD_DIM=kv.head_dim,
        HEAD_DIM_PAD=kv.head_dim_pad,
        BLOCK_M=block_m,
        BLOCK_Q=block_q,
        BLOCK_N=block_n,
        BLOCK_SIZE=kv.block_size,
        QUANT=kv.quant,
        DOT_DTYPE=dot_dtype(query.dtype),
    )
    return out
