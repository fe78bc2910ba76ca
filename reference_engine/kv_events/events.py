"""The KV event structures, field for field those of vLLM 0.33.0 (`vllm/distributed/kv_events.py`).

Encoding (what `msgspec.msgpack.Encoder()` makes of them, and what subscribers rely on):
- a batch is a msgpack array `[ts, events, data_parallel_rank]` (`array_like`); the rank is
  always written because the publisher fills it in before encoding;
- each event is a msgpack map tagged `{"type": "<class name>", ...}` (`tag=True`, not
  array-like since vLLM 0.24); fields without a default are always written (as null when
  None), fields with a default only when they differ from it (`omit_defaults`).

Field order and defaults are part of the format: a test re-encodes the committed vLLM fixture
batches with these structures and compares the bytes. Block hashes are `ExternalBlockHash`:
an unsigned 64-bit int by default (values >= 2**63 occur) or the raw digest bytes.
"""

from __future__ import annotations

from typing import Any

import msgspec

ExternalBlockHash = bytes | int
MEDIUM_GPU = "GPU"
# vLLM's KVCacheSpecKind of a full-attention layer group, set on every BlockStored since 0.32
# (its KV cache manager annotates each store with its group's kind; the bundled model has one
# full-attention group, so its sliding window stays None and is omitted).
FULL_ATTENTION = "full_attention"


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float  # time.time() of the scheduler step
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Base of the three events; the tag is the class name under the key "type"."""


class BlockStored(KVCacheEvent):
    """Blocks that became full and cached, in chain order; `parent_block_hash` is the block
    before the first one (None for a sequence's first block). `token_ids` holds
    `len(block_hashes) * block_size` ids."""

    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None  # deprecated upstream, still written
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None  # one entry per block
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(KVCacheEvent):
    """Cached blocks evicted (vLLM writes one event per hash)."""

    block_hashes: list[ExternalBlockHash]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(KVCacheEvent):
    """The prefix cache was reset: every cached block is gone."""


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


def external_hash(block_hash: bytes) -> int:
    """The published form of an engine block hash: the digest's last 8 bytes as an unsigned
    big-endian int, as vLLM's `maybe_convert_block_hash` does by default."""
    return int.from_bytes(block_hash[-8:], "big")
