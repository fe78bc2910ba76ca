"""The pool of fixed-size KV blocks: allocation, ref counts, and the prefix-cache map.

Invariants (checked by the property tests):
- a block is in the free queue iff its ref_cnt is 0 (the null block is never in it);
- every entry `cached[h]` points to a block whose `block_hash == h`;
- a free block may still be cached: it stays findable until it is popped for reuse, and
  only then is its hash dropped (lazy eviction), so recently freed prefixes still hit.
"""

from __future__ import annotations

from reference_engine.free_block_queue import FreeBlockQueue, KVBlock


class BlockPool:
    def __init__(self, num_blocks: int, enable_caching: bool = True):
        if num_blocks < 2:
            raise ValueError("a block pool needs at least 2 blocks (one is the null block)")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self.free_queue = FreeBlockQueue(self.blocks)
        # Block 0 pads block tables; it is never allocated, so it is taken out for good.
        self.null_block = self.free_queue.popleft()
        self.cached: dict[bytes, KVBlock] = {}

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
        for _ in range(n):
            block = self.free_queue.popleft()
            self._evict(block)
            block.ref_cnt = 1
            out.append(block)
        return out

    def _evict(self, block: KVBlock) -> None:
        if block.block_hash is not None:
            if self.cached.get(block.block_hash) is block:
                del self.cached[block.block_hash]
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

    def cache_full_block(self, block: KVBlock, block_hash: bytes, token_ids: tuple[int, ...]) -> None:
        """Mark a full, computed block as cached. Duplicates are kept out of the map (the
        first holder stays findable) but still get their hash, so block tables never change."""
        if not self.enable_caching or block.block_hash is not None:
            return
        block.block_hash = block_hash
        block.token_ids = token_ids
        self.cached.setdefault(block_hash, block)

    def free_blocks(self, ordered: list[KVBlock]) -> None:
        """Drop one reference on each block; `ordered` is eviction order (first = evict first)."""
        for block in ordered:
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                if block.block_hash is not None:
                    self.free_queue.append(block)
                else:
                    self.free_queue.prepend(block)
