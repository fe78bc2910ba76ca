"""`BlockPool` edge cases: the null block, usage, failed allocations, the prefix-cache map and
its lazy eviction, and where freed blocks go in the eviction order.

Modelled on vLLM's tests/v1/core/test_block_pool.py and test_prefix_caching.py (the null
block is never handed out, a freed cached block stays findable until reused, reuse drops its
hash, a failed allocation changes nothing).
"""

from __future__ import annotations

import pytest

from reference_engine.block_hash import hash_block_tokens
from reference_engine.block_pool import BlockPool
from reference_engine.free_block_queue import KVBlock

TOKENS = (1, 2, 3, 4)
HASH = hash_block_tokens(None, TOKENS)


def _free_ids(pool: BlockPool) -> list[int]:
    return [b.block_id for b in pool.free_queue]


def _cached_and_freed(pool: BlockPool) -> KVBlock:
    (block,) = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [HASH], [TOKENS], None)
    pool.free_blocks([block])
    return block


def test_null_block_is_block_zero_and_never_handed_out() -> None:
    pool = BlockPool(5)
    assert pool.null_block.block_id == 0 and pool.num_free_blocks == 4
    for _ in range(3):
        blocks = pool.get_new_blocks(4)
        assert sorted(b.block_id for b in blocks) == [1, 2, 3, 4]
        pool.free_blocks(blocks)
    assert 0 not in _free_ids(pool)


def test_a_pool_needs_one_usable_block_besides_the_null_block() -> None:
    with pytest.raises(ValueError, match="at least 2 blocks"):
        BlockPool(1)
    assert BlockPool(2).num_free_blocks == 1


def test_usage_is_the_share_of_usable_blocks_held() -> None:
    pool = BlockPool(5)
    assert pool.usage() == 0.0
    held = pool.get_new_blocks(2)
    assert pool.usage() == pytest.approx(0.5)
    rest = pool.get_new_blocks(2)
    assert pool.usage() == 1.0
    pool.cache_full_blocks([held[0]], [HASH], [TOKENS], None)
    pool.free_blocks(held + rest)
    assert pool.usage() == 0.0, "a cached block nobody holds counts as free"


def test_an_allocation_larger_than_the_free_pool_changes_nothing() -> None:
    pool = BlockPool(5)
    held = pool.get_new_blocks(3)
    cached = held[0]
    pool.cache_full_blocks([cached], [HASH], [TOKENS], None)
    before = (_free_ids(pool), [b.ref_cnt for b in pool.blocks], dict(pool.cached))
    with pytest.raises(ValueError, match="cannot allocate 2 blocks, only 1 free"):
        pool.get_new_blocks(2)
    assert (_free_ids(pool), [b.ref_cnt for b in pool.blocks], dict(pool.cached)) == before


def test_new_blocks_start_with_one_reference() -> None:
    pool = BlockPool(4)
    assert [b.ref_cnt for b in pool.get_new_blocks(3)] == [1, 1, 1]


def test_a_freed_cached_block_stays_findable_until_reused() -> None:
    pool = BlockPool(4)
    block = _cached_and_freed(pool)
    assert block.ref_cnt == 0 and block.block_id in _free_ids(pool)
    assert pool.get_cached_block(HASH, TOKENS) is block
    pool.touch([block])  # a prefix hit revives it
    assert block.ref_cnt == 1 and block.block_id not in _free_ids(pool)
    assert pool.num_free_blocks == 2 and pool.get_cached_block(HASH, TOKENS) is block


def test_reusing_a_cached_block_for_new_data_drops_its_hash() -> None:
    pool = BlockPool(2)  # one usable block: the next allocation must evict it
    block = _cached_and_freed(pool)
    (reused,) = pool.get_new_blocks(1)
    assert reused is block
    assert block.block_hash is None and block.token_ids is None
    assert pool.cached == {} and pool.get_cached_block(HASH, TOKENS) is None


def test_a_hash_match_with_other_tokens_is_not_a_hit() -> None:
    pool = BlockPool(3)
    _cached_and_freed(pool)
    assert pool.get_cached_block(HASH, (1, 2, 3, 5)) is None
    assert pool.get_cached_block(hash_block_tokens(None, (9, 9, 9, 9)), TOKENS) is None


def test_a_duplicate_block_keeps_its_hash_but_the_first_holder_stays_in_the_map() -> None:
    pool = BlockPool(4)
    first, second = pool.get_new_blocks(2)
    pool.cache_full_blocks([first], [HASH], [TOKENS], None)
    pool.cache_full_blocks([second], [HASH], [TOKENS], None)
    assert second.block_hash == HASH and pool.cached == {HASH: first}
    pool.free_blocks([second])
    pool.get_new_blocks(2)  # evicts the duplicate (the only free cached block)
    assert pool.cached == {HASH: first}, "evicting a duplicate must not unmap the original"


def test_caching_a_block_twice_keeps_the_first_entry() -> None:
    pool = BlockPool(3)
    (block,) = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [HASH], [TOKENS], None)
    other = hash_block_tokens(HASH, TOKENS)
    pool.cache_full_blocks([block], [other], [TOKENS], None)
    assert block.block_hash == HASH and other not in pool.cached


def test_with_caching_off_nothing_is_published() -> None:
    pool = BlockPool(3, enable_caching=False)
    (block,) = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [HASH], [TOKENS], None)
    assert block.block_hash is None and pool.cached == {}


def test_freed_blocks_uncached_to_the_front_cached_to_the_back() -> None:
    """Uncached blocks hold nothing worth keeping, so they are reused first; cached ones
    queue up LRU, in the order given (a request frees its chain tail first)."""
    pool = BlockPool(5)
    b1, b2, b3, b4 = pool.get_new_blocks(4)
    pool.cache_full_blocks([b1], [HASH], [TOKENS], None)
    pool.cache_full_blocks([b2], [hash_block_tokens(HASH, TOKENS)], [TOKENS], None)
    pool.free_blocks([b4, b3, b2, b1])
    assert _free_ids(pool) == [3, 4, 2, 1]
    assert [b.block_id for b in pool.get_new_blocks(4)] == [3, 4, 2, 1]


def test_touching_a_held_block_only_counts_and_freeing_releases_at_zero() -> None:
    pool = BlockPool(4)
    (block,) = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [HASH], [TOKENS], None)
    free_before = _free_ids(pool)
    pool.touch([block])
    assert block.ref_cnt == 2 and _free_ids(pool) == free_before
    pool.free_blocks([block])
    assert block.ref_cnt == 1 and block.block_id not in _free_ids(pool)
    pool.free_blocks([block])
    assert block.ref_cnt == 0 and _free_ids(pool)[-1] == block.block_id


def test_touching_a_free_cached_block_takes_it_out_of_the_middle() -> None:
    pool = BlockPool(5)
    blocks = pool.get_new_blocks(4)
    for b in blocks:
        pool.cache_full_blocks([b], [hash_block_tokens(None, (b.block_id,) * 4)], [(b.block_id,) * 4], None)
    pool.free_blocks(blocks)
    assert _free_ids(pool) == [1, 2, 3, 4]
    pool.touch([blocks[1]])
    assert _free_ids(pool) == [1, 3, 4] and pool.num_free_blocks == 3
