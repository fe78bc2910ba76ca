"""The pool of fixed-size KV blocks: allocation, ref counts, and the prefix-cache map.

Invariants (checked by the property tests):
- a block is in the free queue iff its ref_cnt is 0 (the null block is never in it);
- every entry `cached[h]` points to a block whose `block_hash == h`;
- a free block may still be cached: it stays findable until it is popped for reuse, and
  only then is its hash dropped (lazy eviction), so recently freed prefixes still hit.

KV events (`events` not None): the pool records vLLM's events at the points vLLM's block pool
emits them, mirroring the map exactly: `BlockStored` when full blocks enter the map (one event
per run of consecutive new blocks of one request), `BlockRemoved` (one per hash) when a cached
block is handed out again, `AllBlocksCleared` on a successful reset. A block whose hash is
already in the map (two requests computed the same prefix at once) is not stored again, so
this pool never publishes a duplicate store (vLLM's, which keeps duplicates findable, does).
Replaying the events therefore rebuilds `cached`'s keys. `residency` (optional) is the
`--kv-cache-metrics` tracker.
"""

from __future__ import annotations

from collections.abc import Sequence

from reference_engine.free_block_queue import FreeBlockQueue, KVBlock
from reference_engine.kv_events.events import (
    FULL_ATTENTION,
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVCacheEvent,
    external_hash,
)
from reference_engine.kv_residency import KVResidencyTracker


class BlockPool:
    def __init__(
        self,
        num_blocks: int,
        enable_caching: bool = True,
        block_size: int = 16,
        enable_kv_events: bool = False,
        residency: KVResidencyTracker | None = None,
    ):
        if num_blocks < 2:
            raise ValueError("a block pool needs at least 2 blocks (one is the null block)")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.block_size = block_size
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        # Block 0 pads block tables; it is never allocated, so it is taken out for good.
        self.null_block = self.free_queue.popleft()
        self.cached: dict[bytes, KVBlock] = {}
        self.events: list[KVCacheEvent] | None = [] if enable_kv_events and enable_caching else None
        self.residency = residency if enable_caching else None

    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.num_free

    def usage(self) -> float:
        """Share of usable blocks held by requests (cached-but-free blocks count as free)."""
        return 1.0 - self.num_free_blocks / (self.num_blocks - 1)

    def get_new_blocks(self, n: int) -> list[KVBlock]:
        if n > self.num_free_blocks:
            raise ValueError(f"cannot allocate {n} blocks, only {self.num_free_blocks} free")
        out = []
        residency = self.residency
        for _ in range(n):
            block = self.free_queue.popleft()
            if residency is not None:
                residency.on_evicted(block.block_id)
            self._evict(block)
            block.ref_cnt = 1
            if residency is not None:
                residency.on_allocated(block.block_id)
            out.append(block)
        return out

    def _evict(self, block: KVBlock) -> None:
        if block.block_hash is not None:
            if self.cached.get(block.block_hash) is block:
                del self.cached[block.block_hash]
                if self.events is not None:
                    self.events.append(
                        BlockRemoved([external_hash(block.block_hash)], MEDIUM_GPU, group_idx=0)
                    )
            block.block_hash = None
            block.token_ids = None

    def get_cached_block(self, block_hash: bytes, token_ids: tuple[int, ...]) -> KVBlock | None:
        block = self.cached.get(block_hash)
        if block is None or block.token_ids != token_ids:
            return None
        return block

    def touch(self, blocks: list[KVBlock]) -> None:
        """Take a reference on blocks found in the prefix cache (reviving free ones)."""
        for block in blocks:
            if block.ref_cnt == 0:
                self.free_queue.remove(block)
            block.ref_cnt += 1
            if self.residency is not None:
                self.residency.on_accessed(block.block_id)

    def cache_full_blocks(
        self,
        blocks: Sequence[KVBlock],
        hashes: Sequence[bytes],
        token_ids: Sequence[tuple[int, ...]],
        parent: bytes | None,
    ) -> None:
        """Mark full, computed blocks as cached, in chain order; `parent` is the hash of the
        block before `blocks[0]` (None at a sequence's start). Blocks that already have a hash
        are skipped. Duplicates are kept out of the map (the first holder stays findable) but
        still get their hash, so block tables never change."""
        if not self.enable_caching:
            return
        run: list[int] = []  # indices of the current run of blocks new to the map
        for i, (block, block_hash, tokens) in enumerate(zip(blocks, hashes, token_ids)):
            if block.block_hash is not None:
                continue
            block.block_hash = block_hash
            block.token_ids = tokens
            if self.cached.setdefault(block_hash, block) is not block:
                self._record_stored(run, hashes, token_ids, parent)
                run = []
                continue
            if run and run[-1] != i - 1:
                self._record_stored(run, hashes, token_ids, parent)
                run = []
            run.append(i)
        self._record_stored(run, hashes, token_ids, parent)

    def _record_stored(
        self,
        run: list[int],
        hashes: Sequence[bytes],
        token_ids: Sequence[tuple[int, ...]],
        parent: bytes | None,
    ) -> None:
        if self.events is None or not run:
            return
        first = run[0]
        before = hashes[first - 1] if first else parent
        self.events.append(
            BlockStored(
                block_hashes=[external_hash(hashes[i]) for i in run],
                parent_block_hash=None if before is None else external_hash(before),
                token_ids=[t for i in run for t in token_ids[i]],
                block_size=self.block_size,
                lora_id=None,
                medium=MEDIUM_GPU,
                lora_name=None,
                extra_keys=[None] * len(run),
                group_idx=0,
                kv_cache_spec_kind=FULL_ATTENTION,
            )
        )

    def free_blocks(self, ordered: list[KVBlock]) -> None:
        """Drop one reference on each block; `ordered` is eviction order (first = evict first)."""
        for block in ordered:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.block_hash is not None:
                    self.free_queue.append(block)
                else:
                    self.free_queue.prepend(block)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block; only when no request holds a block (as vLLM). False
        (nothing changed) while any is in use."""
        if self.num_free_blocks != self.num_blocks - 1:
            return False
        for block in self.blocks:
            block.block_hash = None
            block.token_ids = None
        self.cached.clear()
        if self.residency is not None:
            self.residency.reset()
        if self.events is not None:
            self.events.append(AllBlocksCleared())
        return True

    def take_events(self) -> list[KVCacheEvent]:
        """The events recorded since the last call (empty when events are off)."""
        if not self.events:
            return []
        out, self.events = self.events, []
        return out
