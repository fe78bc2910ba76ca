"""Builders for the attention tests: a paged batch whose sequences have a cached context
(written in an earlier step) and new query tokens (written in this step), in shuffled,
non-contiguous blocks so that every kernel really goes through the block table."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_engine.attention.kv_cache import LayerKVCache, allocate_kv_caches
from reference_engine.attention.metadata import AttentionMetadata

# Which query dtype (the model dtype) each KV format is exercised with.
QUERY_DTYPE = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "fp8": torch.float16,
    "int8": torch.bfloat16,
}


@dataclass(slots=True)
class PagedBatch:
    meta: AttentionMetadata
    query: torch.Tensor  # [T, H, D]; rows past the batch are padding
    key: torch.Tensor  # [T, KVH, D] this step's new keys
    value: torch.Tensor
    prefix_key: torch.Tensor  # [P, KVH, D] the earlier step's keys (the cached context)
    prefix_value: torch.Tensor
    prefix_slots: torch.Tensor  # [P] int64
    num_blocks: int
    block_size: int
    kv_cache_dtype: str

    def new_cache(self) -> LayerKVCache:
        n_kv, d = self.key.shape[1:]
        return allocate_kv_caches(
            1, self.num_blocks, self.block_size, n_kv, d, self.query.dtype, kv_cache_dtype=self.kv_cache_dtype
        )[0]


def make_batch(
    seqs: list[tuple[int, int]],
    block_size: int,
    num_kv_heads: int,
    group: int,
    head_dim: int,
    kv_cache_dtype: str,
    num_pad: int = 0,
    seed: int = 0,
) -> PagedBatch:
    """`seqs` is (cached context length, query length) per sequence; `num_pad` rows of padding
    (slot -1) follow the batch."""
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-(c + q) // block_size) for c, q in seqs]
    num_blocks = sum(blocks_per_seq) + 3
    pool = (torch.randperm(num_blocks - 1, generator=gen) + 1).tolist()  # block 0 is the null block
    tables = torch.zeros(len(seqs), max(blocks_per_seq), dtype=torch.int32)
    prefix_slots, new_slots = [], []
    for b, ((ctx, q_len), n) in enumerate(zip(seqs, blocks_per_seq)):
        ids = [pool.pop() for _ in range(n)]
        tables[b, :n] = torch.tensor(ids, dtype=torch.int32)
        slot = [ids[p // block_size] * block_size + p % block_size for p in range(ctx + q_len)]
        prefix_slots += slot[:ctx]
        new_slots += slot[ctx:]
    query_lens = [q for _, q in seqs]
    seq_lens = [c + q for c, q in seqs]
    num_tokens = sum(query_lens) + num_pad
    dtype = QUERY_DTYPE[kv_cache_dtype]

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(dtype)

    meta = AttentionMetadata(
        slot_mapping=torch.tensor(new_slots + [-1] * num_pad, dtype=torch.int64),
        block_tables=tables,
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        query_start_loc=torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32),
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        seq_lens_host=seq_lens,
        query_lens_host=query_lens,
    )
    num_prefix = len(prefix_slots)
    return PagedBatch(
        meta=meta,
        query=randn(num_tokens, num_kv_heads * group, head_dim),
        key=randn(num_tokens, num_kv_heads, head_dim, scale=2.0),
        value=randn(num_tokens, num_kv_heads, head_dim),
        prefix_key=randn(num_prefix, num_kv_heads, head_dim, scale=2.0),
        prefix_value=randn(num_prefix, num_kv_heads, head_dim),
        prefix_slots=torch.tensor(prefix_slots, dtype=torch.int64),
        num_blocks=num_blocks,
        block_size=block_size,
        kv_cache_dtype=kv_cache_dtype,
    )


def run_step(batch: PagedBatch, backend) -> tuple[torch.Tensor, LayerKVCache]:
    """Write the cached context, then this step's K/V, then attend: all with `backend`, into a new cache."""
    cache = batch.new_cache()
    backend.write_kv(batch.prefix_key, batch.prefix_value, cache, batch.prefix_slots)
    backend.write_kv(batch.key, batch.value, cache, batch.meta.slot_mapping)
    scale = batch.query.shape[-1] ** -0.5
    return backend.attention(batch.query, cache, batch.meta, scale), cache
