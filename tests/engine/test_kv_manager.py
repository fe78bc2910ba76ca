"""`KVCacheManager` edge cases: prefix hits and their reference counts, eviction order,
allocations that cannot succeed, copy-on-write after a fork, reservations and the watermark.

Modelled on vLLM's tests/v1/core/test_prefix_caching.py (prefill with and without a hit,
free order, eviction order on a miss, not enough blocks with computed blocks, prompt
logprobs bypassing the cache). Block size 4 throughout; "computed" is set by hand, as the
scheduler would after the step ran.
"""

from __future__ import annotations

from reference_engine.block_hash import hash_block_tokens
from reference_engine.kv_manager import KVCacheManager
from reference_engine.request import Request
from reference_engine.sampling_params import SamplingParams

BS = 4
COMMON = [t for t in range(1, 4) for _ in range(BS)]  # three full blocks


def _request(rid: str, tokens: list[int], prompt_logprobs: int | None = None) -> Request:
    params = SamplingParams(max_tokens=8, prompt_logprobs=prompt_logprobs)
    return Request(rid, list(tokens), len(tokens), params, 0.0)


def _run_prefill(kv: KVCacheManager, req: Request) -> list[int]:
    """Admit `req` with whatever prefix hit it gets, 'compute' it, publish its full blocks."""
    computed = kv.get_computed_blocks(req)
    hit = len(computed) * BS
    ids = kv.allocate_slots(req, req.num_tokens - hit, computed)
    assert ids is not None
    req.num_computed_tokens = req.num_tokens
    kv.cache_blocks(req)
    return ids


def _free_ids(kv: KVCacheManager) -> list[int]:
    return [b.block_id for b in kv.pool.free_queue]


def _refs(kv: KVCacheManager, ids: list[int]) -> list[int]:
    return [kv.pool.blocks[i].ref_cnt for i in ids]


def test_a_miss_then_a_hit_on_the_shared_full_blocks() -> None:
    kv = KVCacheManager(11, BS)
    req0 = _request("0", COMMON + [7, 7])
    assert kv.get_computed_blocks(req0) == []
    assert _run_prefill(kv, req0) == [1, 2, 3, 4]
    parent = None
    for i in (1, 2, 3):  # full blocks carry the chained hash of their tokens
        block = kv.pool.blocks[i]
        assert block.block_hash == hash_block_tokens(parent, COMMON[(i - 1) * BS : i * BS])
        parent = block.block_hash
    assert kv.pool.blocks[4].block_hash is None, "a partial block is never cached"

    req1 = _request("1", COMMON + [8])
    assert [b.block_id for b in kv.get_computed_blocks(req1)] == [1, 2, 3]
    assert _run_prefill(kv, req1) == [1, 2, 3, 5]
    assert _refs(kv, [1, 2, 3, 4, 5]) == [2, 2, 2, 1, 1]
    assert kv.pool.num_free_blocks == 5


def test_the_last_prompt_token_is_always_computed() -> None:
    kv = KVCacheManager(11, BS)
    _run_prefill(kv, _request("0", COMMON))
    same = _request("1", COMMON)
    assert [b.block_id for b in kv.get_computed_blocks(same)] == [1, 2], "its logits are needed"


def test_free_order_then_a_hit_on_free_blocks_then_eviction_order_on_a_miss() -> None:
    kv = KVCacheManager(11, BS)
    req0, req1 = _request("0", COMMON + [7, 7]), _request("1", COMMON + [8])
    _run_prefill(kv, req0)
    _run_prefill(kv, req1)
    kv.free(req0)
    kv.free(req1)
    # partial blocks first (reused at once), then never-used ones, then the cached chain
    # tail first, so a chain's head is the last to go
    assert _free_ids(kv) == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert kv.pool.num_free_blocks == 10

    req2 = _request("2", COMMON + [9, 9, 9])
    assert _run_prefill(kv, req2) == [1, 2, 3, 5], "free cached blocks hit and are revived"
    assert kv.pool.num_free_blocks == 6 and _refs(kv, [1, 2, 3]) == [1, 1, 1]
    kv.free(req2)

    big = _request("3", [99] * (10 * BS))
    assert kv.get_computed_blocks(big) == []
    ids = kv.allocate_slots(big, big.num_tokens)
    assert ids == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1], "eviction follows the free queue"
    assert kv.pool.cached == {} and all(kv.pool.blocks[i].block_hash is None for i in ids)


def test_an_allocation_that_cannot_fit_changes_nothing() -> None:
    kv = KVCacheManager(5, BS)  # 4 usable blocks
    kv.allocate_slots(_request("0", list(range(12))), 12)
    before = (_free_ids(kv), [b.ref_cnt for b in kv.pool.blocks], dict(kv.req_blocks))
    assert kv.allocate_slots(_request("1", list(range(100, 108))), 8) is None
    assert (_free_ids(kv), [b.ref_cnt for b in kv.pool.blocks], dict(kv.req_blocks)) == before
    assert "1" not in kv.req_block_ids


def test_reviving_computed_blocks_counts_against_the_free_pool() -> None:
    """A hit on free cached blocks takes them out of the free pool too: when the hit plus the
    new blocks do not fit, nothing is touched and the hit blocks stay free and cached."""
    kv = KVCacheManager(5, BS)  # 4 usable blocks
    first = _request("0", COMMON + [7])
    _run_prefill(kv, first)
    kv.free(first)
    held = _request("x", list(range(200, 200 + BS)))
    kv.allocate_slots(held, BS)  # takes the uncached partial block; 3 free, all cached
    again = _request("1", COMMON + [5] * (2 * BS))
    computed = kv.get_computed_blocks(again)
    assert [b.block_id for b in computed] == [1, 2, 3]
    assert kv.allocate_slots(again, again.num_tokens - 3 * BS, computed) is None
    assert _refs(kv, [1, 2, 3]) == [0, 0, 0] and sorted(_free_ids(kv)) == [1, 2, 3]
    assert len(kv.pool.cached) == 3


def test_the_watermark_keeps_blocks_back_only_when_asked() -> None:
    kv = KVCacheManager(5, BS, watermark_blocks=1)
    req = _request("0", list(range(16)))
    assert kv.allocate_slots(req, 16, use_watermark=True) is None
    assert kv.allocate_slots(req, 16) == [1, 2, 3, 4]


def test_decode_inside_a_private_block_allocates_nothing() -> None:
    kv = KVCacheManager(5, BS)
    req = _request("0", list(range(6)))
    ids = kv.allocate_slots(req, 6)
    req.num_computed_tokens = 6
    req.token_ids.append(42)
    assert kv.allocate_slots(req, 1) == ids and kv.pool.num_free_blocks == 2
    req.num_computed_tokens = 7
    req.token_ids += [43, 44]
    assert kv.allocate_slots(req, 2) == ids + [3], "crossing a block boundary takes one block"


def test_copy_on_write_of_a_shared_partial_block_after_a_fork() -> None:
    kv = KVCacheManager(6, BS)
    parent = _request("p", list(range(6)))  # one full block and a partial one with 2 tokens
    _run_prefill(kv, parent)
    child = _request("c", list(range(6)))
    child.num_computed_tokens = 6
    kv.fork(parent, child)
    assert _refs(kv, [1, 2]) == [2, 2]

    child.token_ids.append(50)
    ids = kv.allocate_slots(child, 1)
    assert ids == [1, 3], "the child writes into a private copy of the shared partial block"
    assert kv.block_ids("p") == [1, 2] and _refs(kv, [1, 2, 3]) == [2, 1, 1]
    assert kv.take_copies() == [(2, 3)] and kv.take_copies() == []

    parent.token_ids.append(60)
    assert kv.allocate_slots(parent, 1) == [1, 2], "the parent's block is private again"
    assert kv.take_copies() == []


def test_a_reservation_takes_its_blocks_up_front_and_never_grows() -> None:
    kv = KVCacheManager(8, BS, reservation=lambda r: 16)
    req = _request("0", list(range(5)))
    ids = kv.allocate_slots(req, 5)
    assert ids == [1, 2, 3, 4]
    req.num_computed_tokens = 5
    req.token_ids += [1, 2, 3, 4]
    assert kv.allocate_slots(req, 4) == ids and kv.pool.num_free_blocks == 3


def test_prompt_logprobs_requests_never_skip_prompt_tokens() -> None:
    kv = KVCacheManager(11, BS)
    _run_prefill(kv, _request("0", COMMON + [7]))
    assert kv.get_computed_blocks(_request("1", COMMON + [7], prompt_logprobs=1)) == []


def test_with_caching_off_nothing_hits() -> None:
    kv = KVCacheManager(11, BS, enable_caching=False)
    _run_prefill(kv, _request("0", COMMON + [7]))
    assert kv.pool.cached == {}
    assert kv.get_computed_blocks(_request("1", COMMON + [7])) == []


def test_cache_blocks_publishes_each_block_once_as_it_fills() -> None:
    kv = KVCacheManager(8, BS)
    req = _request("0", list(range(6)))
    kv.allocate_slots(req, 6)
    req.num_computed_tokens = 6
    kv.cache_blocks(req)
    assert len(kv.pool.cached) == 1
    first_hash = kv.pool.blocks[1].block_hash
    req.token_ids += [6, 7, 8]
    kv.allocate_slots(req, 3)
    req.num_computed_tokens = 9
    kv.cache_blocks(req)
    assert kv.pool.blocks[1].block_hash == first_hash, "an earlier block is not re-hashed"
    assert kv.pool.blocks[2].block_hash == hash_block_tokens(first_hash, [4, 5, 6, 7])
    assert kv.pool.blocks[3].block_hash is None and len(kv.pool.cached) == 2


def test_freeing_returns_every_block_and_forgets_the_request() -> None:
    kv = KVCacheManager(6, BS)
    req = _request("0", COMMON + [1])
    _run_prefill(kv, req)
    kv.free(req)
    assert kv.pool.num_free_blocks == 5 and kv.block_ids("0") == []
    kv.free(req)  # a second free (abort after finish) is harmless
    assert kv.pool.num_free_blocks == 5
