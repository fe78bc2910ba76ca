"""An intrusive doubly linked list of free KV blocks, in eviction order.

Why not a deque: a prefix-cache hit on a free block must take it out of the *middle* of
the queue, and that has to be O(1) with thousands of blocks (vLLM's FreeKVCacheBlockQueue
does the same). The links live in the blocks themselves; sentinels remove edge cases.

Order: the front is evicted first. Callers free a request's blocks in reverse order and
append cached blocks at the back (LRU, chain tails first) and prepend uncached ones (they
hold nothing worth keeping, so they are reused first).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class KVBlock:
    """One page of the KV cache. `ref_cnt` counts the block tables that hold it.

    `block_hash` and `token_ids` are set once the block is full and computed; a block with
    a hash is immutable (it may be shared through the prefix cache) until it is evicted.
    """

    block_id: int
    ref_cnt: int = 0
    block_hash: bytes | None = None
    token_ids: tuple[int, ...] | None = None
    prev_free: KVBlock | None = None
    next_free: KVBlock | None = None


class FreeBlockQueue:
    def __init__(self, blocks: list[KVBlock]):
        self._head = KVBlock(-1)
        self._tail = KVBlock(-1)
        self._head.next_free = self._tail
        self._tail.prev_free = self._head
        self.num_free = 0
        for block in blocks:
            self.append(block)

    def popleft(self) -> KVBlock:
        block = self._head.next_free
        if block is self._tail or block is None:
            raise IndexError("no free blocks")
        self.remove(block)
        return block

    def remove(self, block: KVBlock) -> None:
        if block.prev_free is None or block.next_free is None:
            raise ValueError(f"block {block.block_id} is not in the free queue")
        block.prev_free.next_free = block.next_free
        block.next_free.prev_free = block.prev_free
        block.prev_free = block.next_free = None
        self.num_free -= 1

    def append(self, block: KVBlock) -> None:
        self._insert_after(self._tail.prev_free, block)

    def prepend(self, block: KVBlock) -> None:
        self._insert_after(self._head, block)

    def _insert_after(self, anchor: KVBlock | None, block: KVBlock) -> None:
        assert anchor is not None and anchor.next_free is not None
        block.prev_free, block.next_free = anchor, anchor.next_free
        anchor.next_free.prev_free = block
        anchor.next_free = block
        self.num_free += 1

    def __iter__(self) -> Iterator[KVBlock]:
        block = self._head.next_free
        while block is not None and block is not self._tail:
            yield block
            block = block.next_free

    def __len__(self) -> int:
        return self.num_free
