"""`FreeBlockQueue`: the intrusive doubly linked list of free blocks, in eviction order.

Modelled on what vLLM checks of its FreeKVCacheBlockQueue: O(1) removal from the middle (the
neighbours are relinked directly, the removed block keeps no links), front-first eviction,
sentinels that make the first and last elements ordinary, and clear errors for misuse.
"""

from __future__ import annotations

import pytest

from reference_engine.free_block_queue import FreeBlockQueue, KVBlock


def _queue(n: int) -> tuple[FreeBlockQueue, list[KVBlock]]:
    blocks = [KVBlock(i) for i in range(n)]
    return FreeBlockQueue(blocks), blocks


def _ids(q: FreeBlockQueue) -> list[int]:
    return [b.block_id for b in q]


def test_blocks_start_in_the_order_given() -> None:
    q, _ = _queue(4)
    assert _ids(q) == [0, 1, 2, 3] and len(q) == q.num_free == 4


def test_free_queue_removal_from_the_middle_is_constant_time_and_ordered() -> None:
    q, blocks = _queue(6)
    q.remove(blocks[3])
    q.prepend(blocks[3])
    assert [b.block_id for b in q] == [3, 0, 1, 2, 4, 5]
    assert q.popleft() is blocks[3] and len(q) == 5


def test_middle_removal_relinks_the_neighbours_and_clears_the_block() -> None:
    q, blocks = _queue(5)
    q.remove(blocks[2])
    assert blocks[1].next_free is blocks[3] and blocks[3].prev_free is blocks[1]
    assert blocks[2].prev_free is None and blocks[2].next_free is None
    assert _ids(q) == [0, 1, 3, 4] and len(q) == 4


def test_first_and_last_blocks_are_removed_like_any_other() -> None:
    q, blocks = _queue(3)
    q.remove(blocks[0])
    q.remove(blocks[2])
    assert _ids(q) == [1]
    q.remove(blocks[1])
    assert _ids(q) == [] and len(q) == 0


def test_popleft_takes_the_front_then_append_and_prepend_place_at_the_ends() -> None:
    q, blocks = _queue(4)
    first = q.popleft()
    assert first is blocks[0] and first.prev_free is None and first.next_free is None
    q.append(first)
    assert _ids(q) == [1, 2, 3, 0]
    last = blocks[3]
    q.remove(last)
    q.prepend(last)
    assert _ids(q) == [3, 1, 2, 0]


def test_eviction_order_is_first_in_first_out_for_appended_blocks() -> None:
    q, _ = _queue(0)
    for b in (KVBlock(7), KVBlock(5), KVBlock(9)):
        q.append(b)
    assert [q.popleft().block_id for _ in range(3)] == [7, 5, 9]


def test_an_empty_queue_refuses_popleft_and_stays_usable() -> None:
    q, blocks = _queue(1)
    q.popleft()
    with pytest.raises(IndexError, match="no free blocks"):
        q.popleft()
    assert len(q) == 0
    q.append(blocks[0])
    assert _ids(q) == [0]


def test_removing_a_block_that_is_not_queued_is_an_error_and_changes_nothing() -> None:
    q, blocks = _queue(3)
    q.remove(blocks[1])
    with pytest.raises(ValueError, match="not in the free queue"):
        q.remove(blocks[1])
    with pytest.raises(ValueError, match="not in the free queue"):
        q.remove(KVBlock(99))
    assert _ids(q) == [0, 2] and len(q) == 2
