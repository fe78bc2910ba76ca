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
    """Scatter `key`/`value` `[T, num_kv_heads, head_dim]` into their slots; slot -1 is padding."""
    if key.shape[0] == 0:
        return
    quant = cache.quant
    if quant == KVQuant.FP8_PER_TENSOR:
        calibrate_fp8_scales(cache, key, value, slot_mapping)
    valid = slot_mapping >= 0
    slots = slot_mapping[valid]
    block_size = cache.block_size
    blocks, offsets = slots // block_size, slots % block_size
    for x, data, scale in ((key, cache.key, cache.k_scale), (value, cache.value, cache.v_scale)):
        x = x[valid]
        if quant == KVQuant.FP8_PER_TENSOR:
            data[blocks, offsets] = quantize_fp8(x, scale)
        elif quant == KVQuant.INT8_PER_TOKEN_HEAD:
            data[blocks, offsets], scale[blocks, offsets] = quantize_int8(x)
        else:
            data[blocks, offsets] = x.to(data.dtype)


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


def paged_decode_attention(
    query: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    """`paged_attention` for a batch whose every query length is 1, batched: contexts are
    gathered to the longest one and the positions past each sequence's length masked out."""
    num_seqs = meta.num_seqs
    out = torch.zeros_like(query)
    if num_seqs == 0:
        return out
    block_size = cache.block_size
    max_len = meta.max_seq_len
    ids = meta.block_tables[:, : (max_len + block_size - 1) // block_size].long()
    kv = []
    for data, scale_t in ((cache.key, cache.k_scale), (cache.value, cache.v_scale)):
        pages = data[ids].reshape(num_seqs, -1, *data.shape[2:])[:, :max_len]
        if cache.quant == KVQuant.INT8_PER_TOKEN_HEAD:
            scale_t = scale_t[ids].reshape(num_seqs, -1, scale_t.shape[2])[:, :max_len]
        kv.append(dequantize(pages, scale_t))  # [B, S, KVH, D]
    k, v = kv
    num_heads, num_kv_heads, head_dim = query.shape[1], k.shape[2], k.shape[3]
    q = query[:num_seqs].float().view(num_seqs, num_kv_heads, num_heads // num_kv_heads, head_dim)
    scores = torch.einsum("bkgd,bskd->bkgs", q, k) * scale
    beyond = torch.arange(max_len, device=query.device)[None, :] >= meta.seq_lens[:, None]
    scores.masked_fill_(beyond[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out[:num_seqs] = (
        torch.einsum("bkgs,bskd->bkgd", probs, v).reshape(num_seqs, num_heads, head_dim).to(query.dtype)
    )
    return out
