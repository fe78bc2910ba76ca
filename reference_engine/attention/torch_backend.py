"""Pure-torch paged attention: gathers keys and values through the block table.

`paged_attention` (one sequence at a time) is the specification the Triton kernels and the
batched decode path are tested against. `paged_decode_attention` is the CPU fast path for a
step in which every sequence decodes one token: one gather and two batched products for the
whole batch instead of a dozen small ops per sequence per layer, which dominated decode
steps at 16+ sequences. Quantized caches are quantized on store and dequantized to fp32 on
gather, with the formats defined in the quantization module.
"""

from __future__ import annotations

import torch

from reference_engine.attention.kv_cache import LayerKVCache, calibrate_fp8_scales
from reference_engine.attention.metadata import AttentionMetadata
from reference_engine.attention.quantization import (
    KVQuant,
    dequantize,
    quantize_fp8,
    quantize_int8,
)


def write_kv(key: torch.Tensor, value: torch.Tensor, cache: LayerKVCache, slot_mapping: torch.Tensor) -> None:
    """Scatter `key`/`value` `[T, num_kv_heads, head_dim]` into their slots; slot -1 is padding.

    A slot is a row of the cache seen as `[num_blocks * block_size, ...]` (block * block_size +
    offset), so the scatter is one `index_copy_` per tensor (several times faster on CPU than
    indexing by block and offset)."""
    if key.shape[0] == 0:
        return
    quant = cache.quant
    if quant == KVQuant.FP8_PER_TENSOR:
        calibrate_fp8_scales(cache, key, value, slot_mapping)
    valid = slot_mapping >= 0
    if not bool(valid.all()):
        slot_mapping, key, value = slot_mapping[valid], key[valid], value[valid]
    for x, data, scale in ((key, cache.key, cache.k_scale), (value, cache.value, cache.v_scale)):
        rows = data.view(-1, *data.shape[2:])
        if quant == KVQuant.FP8_PER_TENSOR:  # as bytes: index_copy_ has no float8 kernel on CPU
            rows.view(torch.uint8).index_copy_(0, slot_mapping, quantize_fp8(x, scale).view(torch.uint8))
        elif quant == KVQuant.INT8_PER_TOKEN_HEAD:
            q, row_scales = quantize_int8(x)
            rows.index_copy_(0, slot_mapping, q)
            scale.view(-1, scale.shape[2]).index_copy_(0, slot_mapping, row_scales)
        else:
            rows.index_copy_(0, slot_mapping, x.to(data.dtype))


def gather_kv(
    cache: LayerKVCache, block_table: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `seq_len` tokens of one sequence's K and V, `[seq_len, num_kv_heads, head_dim]`, fp32."""
    block_size = cache.block_size
    num_blocks = (seq_len + block_size - 1) // block_size
    ids = block_table[:num_blocks].long()
    out = []
    for data, scale in ((cache.key, cache.k_scale), (cache.value, cache.v_scale)):
        pages = data[ids].reshape(-1, *data.shape[2:])[:seq_len]
        if cache.quant == KVQuant.INT8_PER_TOKEN_HEAD:
            scale = scale[ids].reshape(-1, scale.shape[2])[:seq_len]
        out.append(dequantize(pages, scale))
    return out[0], out[1]


def paged_attention(
    query: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """Causal attention of `query` `[T, num_heads, head_dim]` over each sequence's paged context.

    Query row i of sequence b sits at position `seq_len_b - query_len_b + i` and sees
    context positions `0 .. that position`. Rows past the last sequence (padding) are zero.
    """
    out = torch.zeros_like(query)
    num_heads, num_kv_heads = query.shape[1], cache.key.shape[2]
    group = num_heads // num_kv_heads
    start = 0
    for b, (seq_len, q_len) in enumerate(zip(meta.seq_lens_host, meta.query_lens_host)):
        q = query[start : start + q_len].float()  # [q, H, D]
        k, v = gather_kv(cache, meta.block_tables[b], seq_len)  # [s, KVH, D]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,shd->hqs", q, k) * scale
        q_pos = torch.arange(seq_len - q_len, seq_len, device=query.device)[:, None]
        k_pos = torch.arange(seq_len, device=query.device)[None, :]
        scores.masked_fill_(k_pos > q_pos, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[start : start + q_len] = torch.einsum("hqs,shd->qhd", probs, v).to(query.dtype)
        start += q_len
    return out


def _gather_pages(data: torch.Tensor, ids: torch.Tensor, num_seqs: int) -> torch.Tensor:
    """Blocks `ids` of a cache tensor `[num_blocks, block_size, ...]`, as `[num_seqs, tokens, ...]`:
    one `index_select` over whole blocks (an order of magnitude cheaper on CPU than advanced
    indexing)."""
    rows = data.view(data.shape[0], -1).index_select(0, ids)
    return rows.view(num_seqs, -1, *data.shape[2:])


def decode_plan(meta: AttentionMetadata, block_size: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(block ids to gather, additive mask [B, 1, S]: 0 within each context, -inf past it), the
    same for every layer of the step, so derived once."""
    plan = meta.derived.get("torch_decode")
    if plan is None:
        ids = meta.block_tables[:, : (meta.max_seq_len + block_size - 1) // block_size]
        positions = torch.arange(ids.shape[1] * block_size, device=device)[None, :]
        bias = torch.zeros(positions.shape[1], device=device).expand(meta.num_seqs, -1).clone()
        bias.masked_fill_(positions >= meta.seq_lens[:, None], float("-inf"))
        plan = meta.derived["torch_decode"] = (ids.reshape(-1), bias[:, None, :])
    return plan


def _one_sequence(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float
) -> torch.Tensor:
    """Every KV head of one sequence in one pair of batched products: `q` `[KVH, group, D]`,
    `k`/`v` `[S, KVH, D]` seen as KVH strided `[S, D]` matrices (no copy), so the batch is the
    heads. At batch 1 a decode step is bound by per-op overhead, and this is a third of the
    per-head loop's ops; each head's products are the loop's own."""
    num_kv_heads, group, seq = q.shape[0], q.shape[1], k.shape[0]
    scores = torch.baddbmm(bias.expand(num_kv_heads, group, seq), q, k.permute(1, 2, 0), alpha=scale)
    return torch.bmm(torch.softmax(scores, dim=-1), v.transpose(0, 1))


def paged_decode_attention(
    query: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """`paged_attention` for a batch whose every query length is 1, batched: contexts are
    gathered to the longest one and the positions past each sequence's length masked out.
    One pair of batched products per KV head, on strided views of the gathered pages, so no
    transposed copy of the context is ever made."""
    num_seqs = meta.num_seqs
    if num_seqs == 0:
        return torch.zeros_like(query)
    ids, bias = decode_plan(meta, cache.block_size, query.device)
    kv = []
    for data, scale_t in ((cache.key, cache.k_scale), (cache.value, cache.v_scale)):
        pages = _gather_pages(data, ids, num_seqs)  # [B, S, KVH, D]
        if cache.quant == KVQuant.INT8_PER_TOKEN_HEAD:
            scale_t = _gather_pages(scale_t, ids, num_seqs)
        kv.append(dequantize(pages, scale_t))
    k, v = kv
    num_heads, num_kv_heads, head_dim = query.shape[1], k.shape[2], k.shape[3]
    group = num_heads // num_kv_heads
    q = query[:num_seqs].float().view(num_seqs, num_kv_heads, group, head_dim)
    if num_seqs == 1:
        attended = _one_sequence(q[0], k[0], v[0], bias, scale)
    else:
        attended = torch.empty(num_seqs, num_kv_heads, group, head_dim, device=query.device)
        for h in range(num_kv_heads):
            scores = torch.baddbmm(bias, q[:, h], k[:, :, h].transpose(1, 2), alpha=scale)  # [B, group, S]
            torch.bmm(torch.softmax(scores, dim=-1), v[:, :, h], out=attended[:, h])
    attended = attended.view(num_seqs, num_heads, head_dim).to(query.dtype)
    if query.shape[0] == num_seqs:
        return attended
    out = torch.zeros_like(query)  # padding rows stay zero
    out[:num_seqs] = attended
    return out
