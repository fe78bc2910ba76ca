"""The subscriber's pure parts: sequence handling (gaps, replay, restarts, bounds), one
instance's blocks (capacity misses and their distances, duplicates, bounded memory), the
miss-ratio curve's rule, hot chains and blocks shared by replicas."""

from __future__ import annotations

from exporter.kv_events.blocks import InstanceBlocks, Tier
from exporter.kv_events.chains import hot_chains, key_text, shared_blocks
from exporter.kv_events.curve import MissRatioCurve, projected_hit_ratio
from exporter.kv_events.distance import DistanceHistogram, bucket_bounds, bucket_of
from exporter.kv_events.stream import EventStream
from exporter.kv_events.wire import BatchDecoder
from tests.exporter.kv_publisher import batch, removed, stored


class Log:
    def __init__(self, can_replay: bool = True, max_pending: int = 100) -> None:
        self.applied: list[int] = []
        self.restarts = 0
        self.stream = EventStream(self.applied_one, self.restart, can_replay, max_pending)

    def applied_one(self, seq: int, payload: bytes) -> None:
        self.applied.append(seq)

    def restart(self) -> None:
        self.restarts += 1


def test_in_order_batches_apply_and_a_gap_asks_for_replay() -> None:
    log = Log()
    s = log.stream
    assert [s.live(i, b"") for i in range(3)] == [None] * 3
    assert s.live(5, b"") == 3 and s.replaying
    assert s.live(6, b"") is None and log.applied == [0, 1, 2]
    for seq in (3, 4, 5):  # the replay covers the gap and the held 5
        s.replay_batch(seq, b"")
    s.replay_done(timed_out=False)
    assert log.applied == [0, 1, 2, 3, 4, 5, 6] and s.expected == 7
    assert s.problems == {"gap": 1} and s.replayed == 3


def test_a_replay_that_no_longer_has_the_batches_counts_them_lost() -> None:
    log = Log()
    s = log.stream
    s.live(0, b"")
    assert s.live(10, b"") == 1
    s.replay_batch(7, b"")  # the buffer starts at 7: 1..6 are gone
    s.replay_done(timed_out=False)
    assert log.applied == [0, 7, 10] and s.problems == {"gap": 1, "lost": 8}  # 1-6 and 8-9


def test_without_replay_a_gap_is_lost_at_once() -> None:
    log = Log(can_replay=False)
    s = log.stream
    s.live(0, b"")
    assert s.live(4, b"") is None
    assert log.applied == [0, 4] and s.problems == {"gap": 1, "lost": 3}


def test_a_timed_out_replay_applies_what_was_held() -> None:
    log = Log()
    s = log.stream
    s.live(0, b"")
    s.live(3, b"")
    s.live(4, b"")
    s.replay_done(timed_out=True)
    s.replay_batch(1, b"")  # a late answer to the abandoned request: ignored
    assert log.applied == [0, 3, 4] and s.problems == {"gap": 1, "replay_timeout": 1, "lost": 2}


def test_a_sequence_that_starts_again_is_a_restart() -> None:
    log = Log()
    s = log.stream
    for i in range(5):
        s.live(i, b"")
    assert s.live(0, b"") is None
    assert log.restarts == 1 and log.applied == [0, 1, 2, 3, 4, 0] and s.problems == {"restart": 1}
    assert s.live(3, b"") == 1  # then a gap in the new sequence


def test_a_restart_during_a_replay_ends_it() -> None:
    log = Log()
    s = log.stream
    s.live(0, b"")
    s.live(5, b"")
    assert s.replaying
    s.live(0, b"")  # the publisher came back before answering
    assert not s.replaying and log.restarts == 1 and log.applied == [0, 5, 0]


def test_joining_late_replays_from_zero_and_counts_what_the_buffer_missed() -> None:
    log = Log()
    s = log.stream
    assert s.live(50, b"") == 0
    s.replay_batch(40, b"")  # the publisher kept 40..50
    for seq in range(41, 51):
        s.replay_batch(seq, b"")
    s.replay_done(timed_out=False)
    assert log.applied == list(range(40, 51)) and s.missed_at_join == 40 and s.problems == {}


def test_live_batches_held_during_a_replay_are_bounded() -> None:
    log = Log(max_pending=3)
    s = log.stream
    s.live(0, b"")
    s.live(2, b"")
    for seq in range(3, 8):
        s.live(seq, b"")
    assert len(s.pending) == 3 and s.problems["overflow"] == 3


def test_capacity_misses_measure_evictions_between_eviction_and_return() -> None:
    inst = InstanceBlocks()
    dec = BatchDecoder()
    inst.apply(dec.decode(batch([stored([1, 2, 3]), stored([10])])).events, 0.0)
    inst.apply(dec.decode(batch([removed([3]), removed([2]), removed([10])])).events, 0.0)
    inst.apply(dec.decode(batch([stored([2], parent=1), stored([3], parent=2)])).events, 0.0)
    tier = inst.tiers["GPU"]
    assert tier.capacity_misses == 2 and tier.first_stores == 4 and tier.clock == 3
    # 2 was evicted at clock 2 and 3 at clock 1, both return at clock 3
    assert tier.distances.counts == {1: 1, 2: 1}
    assert set(tier.cached) == {1, 2, 3} and tier.cached[3].depth == 3


def test_duplicates_are_counted_per_copy() -> None:
    """vLLM stores a hash twice when two requests computed it at once; each copy is removed."""
    tier = Tier()
    tier.store([7], None, 16)
    tier.store([7], None, 16)
    tier.remove([7])
    assert 7 in tier.cached and tier.duplicate_stores == 1
    tier.remove([7])
    tier.remove([7])
    assert 7 not in tier.cached and tier.unknown_removes == 1 and tier.removed_blocks == 2


def test_memory_is_bounded() -> None:
    tier = Tier(max_blocks=100, history=50)
    tier.store(list(range(250)), None, 16)
    assert len(tier.cached) == 100 and tier.overflow == 150
    tier.remove(list(range(150, 250)))
    assert len(tier.evicted) == 50 and min(tier.evicted) == 200


def test_groups_other_than_0_are_their_own_keys_and_media_their_own_tiers() -> None:
    inst = InstanceBlocks()
    events = [stored([5]), stored([5], group_idx=1), stored([5], medium="CPU")]
    inst.apply(BatchDecoder().decode(batch(events)).events, 0.0)
    assert set(inst.tiers["GPU"].cached) == {5, (1, 5)} and set(inst.tiers["CPU"].cached) == {5}
    assert key_text((1, 5)) == "1:0000000000000005" and key_text(2**64 - 1) == "f" * 16


def test_the_curve_counts_a_miss_avoidable_when_the_larger_pool_still_held_it() -> None:
    curve = MissRatioCurve((0.5,))
    curve.on_miss(0, 5, pool_blocks=10)  # d = 5 < 5? no
    assert curve.avoidable[0.5] == 0
    curve.on_miss(2, 6, pool_blocks=10)  # d = 4 < 5: avoidable
    curve.on_miss(1, 7, pool_blocks=10)  # d = 6, but the pool saved one eviction at 6: 5 < 5? no
    curve.on_miss(2, 8, pool_blocks=10)  # d = 6 - 1 saved (at 6) = 5: no
    curve.on_miss(4, 9, pool_blocks=10)  # d = 5 - 1 = 4: avoidable
    assert curve.avoidable[0.5] == 2
    assert projected_hit_ratio(1000, 400, 10, 16) == 0.56 and projected_hit_ratio(0, 0, 1, 16) is None


def test_distance_buckets_cover_every_value_once() -> None:
    prev = -1
    for d in [*range(200), 1000, 4095, 4096, 10**6]:
        b = bucket_of(d)
        low, high = bucket_bounds(b)
        assert low <= d < high and b >= prev
        prev = b
    h = DistanceHistogram()
    for d in range(1000):
        h.add(d)
    assert h.count_below(500) == 500 and abs(h.count_below(700) - 700) < 20
    assert DistanceHistogram.from_dict(h.to_dict()).counts == h.counts


def test_hot_chains_rank_prefixes_by_continuations() -> None:
    tier = Tier()
    tier.block_size = 16
    tier.store([1, 2, 3], None, 16)  # a system prompt of 3 blocks
    for i in range(5):
        tier.store([100 + i], 3, 16)  # five requests continue after it
    tier.store([200], 1, 16)
    tier.store([201], 1, 16)
    tier.store([300], 100, 16)  # a single continuation: not hot
    (first, second) = hot_chains(tier)
    assert (first.reuse, first.depth_blocks, first.depth_tokens) == (5, 3, 48)
    assert (second.reuse, second.depth_blocks) == (2, 1)
    tier.remove([3])
    assert [c.reuse for c in hot_chains(tier)] == [2]


def test_blocks_shared_by_replicas() -> None:
    a, b, c = Tier(), Tier(), Tier()
    a.store([1, 2, 3], None, 16)
    b.store([1, 2, 9], None, 16)
    c.store([3, 4], None, 16)
    per, fleet = shared_blocks({"a": a, "b": b, "c": c})
    assert per == {"a": 3, "b": 2, "c": 1} and fleet == 3
