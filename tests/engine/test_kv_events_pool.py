"""Where the block pool records KV events, and the residency tracker behind --kv-cache-metrics.

vLLM's points: BlockStored when full blocks get their hash cached (one event per run of new
blocks, parent = the block before), BlockRemoved (one per hash) when a cached block is
handed out again, AllBlocksCleared when a reset succeeds. The property test drives the real
scheduler through prefix sharing, preemption, parallel sampling and aborts, and checks after
every step that replaying the events gives exactly the pool's prefix-cache map.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from reference_engine.block_hash import hash_block_tokens
from reference_engine.block_pool import BlockPool
from reference_engine.kv_events.events import AllBlocksCleared, BlockRemoved, BlockStored, external_hash
from reference_engine.kv_residency import KVResidencyTracker
from reference_engine.sampling_params import SamplingParams
from tests.engine.fakes import check_invariants, make_engine

A, B, C = (1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11, 12)
HA = hash_block_tokens(None, A)
HB = hash_block_tokens(HA, B)
HC = hash_block_tokens(HB, C)


def _pool(num_blocks: int = 4, **kw) -> BlockPool:
    return BlockPool(num_blocks, block_size=4, enable_kv_events=True, **kw)


def test_a_run_of_new_blocks_is_one_store_with_its_parent() -> None:
    pool = _pool(5)
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(blocks[:1], [HA], [A], None)
    pool.cache_full_blocks(blocks, [HA, HB, HC], [A, B, C], None)  # the first is cached already
    first, second = pool.take_events()
    kind = "full_attention"  # vLLM >= 0.32 annotates every store with its group's kind
    assert first == BlockStored([external_hash(HA)], None, list(A), 4, None, "GPU", None, [None], 0, kind)
    assert second.block_hashes == [external_hash(HB), external_hash(HC)]
    assert second.parent_block_hash == external_hash(HA) and second.token_ids == list(B + C)
    assert pool.take_events() == []


def test_a_duplicate_splits_the_run_and_is_not_stored() -> None:
    pool = _pool(6)
    original = pool.get_new_blocks(1)
    pool.cache_full_blocks(original, [HB], [B], HA)
    pool.take_events()
    blocks = pool.get_new_blocks(3)
    pool.cache_full_blocks(blocks, [HA, HB, HC], [A, B, C], None)
    events = pool.take_events()
    assert [e.block_hashes for e in events] == [[external_hash(HA)], [external_hash(HC)]]
    assert events[1].parent_block_hash == external_hash(HB)
    assert pool.cached[HB] is original[0] and blocks[1].block_hash == HB


def test_removed_when_a_cached_block_is_handed_out_again_not_when_freed() -> None:
    pool = _pool(2)  # one usable block
    (block,) = pool.get_new_blocks(1)
    pool.cache_full_blocks([block], [HA], [A], None)
    pool.free_blocks([block])
    pool.take_events()
    assert pool.take_events() == []  # freeing alone evicts nothing
    pool.get_new_blocks(1)
    assert pool.take_events() == [BlockRemoved([external_hash(HA)], "GPU", group_idx=0)]


def test_reset_clears_everything_only_when_no_block_is_held() -> None:
    pool = _pool(4)
    held = pool.get_new_blocks(2)
    pool.cache_full_blocks(held, [HA, HB], [A, B], None)
    pool.take_events()
    assert not pool.reset_prefix_cache() and pool.take_events() == [] and len(pool.cached) == 2
    pool.free_blocks(held)
    assert pool.reset_prefix_cache()
    assert pool.take_events() == [AllBlocksCleared()] and not pool.cached
    assert all(b.block_hash is None for b in pool.blocks)
    assert pool.get_cached_block(HA, A) is None


def test_no_events_without_the_switch_or_without_caching() -> None:
    for pool in (BlockPool(4), BlockPool(4, enable_caching=False, enable_kv_events=True)):
        (block,) = pool.get_new_blocks(1)
        pool.cache_full_blocks([block], [HA], [A], None)
        assert pool.events is None and pool.take_events() == []


def _replay(events, cached: set[int]) -> None:
    for e in events:
        if isinstance(e, BlockStored):
            assert not cached & set(e.block_hashes), "this pool never stores a hash twice"
            cached.update(e.block_hashes)
        elif isinstance(e, BlockRemoved):
            assert set(e.block_hashes) <= cached
            cached.difference_update(e.block_hashes)
        else:
            cached.clear()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), num_blocks=st.integers(6, 40))
def test_replayed_events_equal_the_prefix_cache_map_after_every_step(seed: int, num_blocks: int) -> None:
    """Recording is switched on by giving the pool an event list (what LLMEngine does when
    it has a publisher), so no sockets are involved."""
    rng = random.Random(seed)
    engine = make_engine(num_blocks=num_blocks, block_size=4, max_num_seqs=4, max_num_batched_tokens=24)
    engine.kv.pool.events = []
    prefixes = [[rng.randrange(1, 90) for _ in range(rng.randrange(4, 13))] for _ in range(3)]
    cached: set[int] = set()
    for step in range(120):
        if rng.random() < 0.3 and len(engine.groups) < 6:
            prompt = rng.choice(prefixes) + [rng.randrange(1, 90) for _ in range(rng.randrange(1, 9))]
            params = SamplingParams(max_tokens=rng.randrange(1, 10), n=rng.choice((1, 1, 2)))
            try:
                engine.add_request(prompt, params)
            except ValueError:
                pass
        if rng.random() < 0.05 and engine.groups:
            engine.abort(rng.choice(sorted(engine.groups)))
        if engine.has_unfinished():
            engine.step()
        elif rng.random() < 0.2:
            engine.reset_prefix_cache()
        _replay(engine.kv.pool.take_events(), cached)
        check_invariants(engine)
        assert cached == {external_hash(h) for h in engine.kv.pool.cached}, f"step {step}"


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_residency_lifetime_idle_and_at_most_three_reuse_gaps() -> None:
    clock = _Clock()
    tracker = KVResidencyTracker(1.0, clock)
    pool = BlockPool(2, residency=tracker)
    (block,) = pool.get_new_blocks(1)  # allocated at t=0
    pool.cache_full_blocks([block], [HA], [A], None)
    pool.free_blocks([block])
    for t in (1.0, 3.0, 6.0, 10.0, 15.0):  # five prefix hits
        clock.t = t
        pool.touch([block])
        pool.free_blocks([block])
    clock.t = 21.0
    pool.get_new_blocks(1)  # handed out again: evicted
    got = tracker.take()
    assert ("lifetime", 21.0) in got and ("idle_before_evict", 6.0) in got
    assert sorted(v for k, v in got if k == "reuse_gap") == [3.0, 4.0, 5.0]  # last 4 accesses kept
    assert tracker.take() == []


def test_residency_samples_allocations_and_reset_drops_tracking() -> None:
    tracker = KVResidencyTracker(0.5, _Clock(), random.Random(7))
    pool = BlockPool(201, residency=tracker)
    pool.free_blocks(pool.get_new_blocks(200))
    assert 60 < len(tracker.tracked) < 140  # about half of 200 allocations
    assert pool.reset_prefix_cache() and tracker.tracked == {}
    pool.get_new_blocks(200)
    assert [k for k, _ in tracker.take()] == []  # nothing was tracked at the evictions
