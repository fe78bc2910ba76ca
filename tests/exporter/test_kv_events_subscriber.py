"""The subscriber on real ZeroMQ sockets, against a publisher speaking vLLM's protocol
(kv_publisher.py; the bundled engine's own publisher is in tests/integration): what it
cannot use is counted by reason and never ends it; gaps (forced, or a high-water-mark drop)
are replayed; a restarted publisher resets the state; a publisher that disappears is seen
as disconnected, and an unanswered replay request is given up."""

from __future__ import annotations

import time

import pytest
import zmq

from exporter.kv_events.source import Limits, SourceState
from exporter.kv_events.spec import KvEventsSource
from exporter.kv_events.subscriber import Subscriber, SubscriberError
from tests.exporter.kv_publisher import Publisher, batch, removed, stored
from tests.support.wait import wait_until


@pytest.fixture
def publisher():
    pub = Publisher()
    yield pub
    pub.close()


def subscribe(pub: Publisher, limits: Limits | None = None, replay: bool = True) -> Subscriber:
    source = KvEventsSource("vllm", pub.endpoint, pub.replay_endpoint if replay else None, topic="kv")
    sub = Subscriber(SourceState(source, limits)).start()
    wait_until(lambda: sub.state.connected, "the subscriber connected")

    def joined() -> (
        int
    ):  # PUB/SUB slow joiner: empty batches until one arrives (replay from 0 fetches the rest)
        pub.send(batch([]))
        return sub.state.stream.applied

    wait_until(joined, "a first batch applied", interval_s=0.02)
    wait_until(lambda: not sub.state.stream.replaying, "the first replay done")
    return sub


def cached(sub: Subscriber) -> set:
    with sub.state.lock:
        inst = sub.state.instances.get("0")
        return set(inst.tiers["GPU"].cached) if inst and "GPU" in inst.tiers else set()


def settled(sub: Subscriber, pub: Publisher) -> bool:
    with sub.state.lock:
        return sub.state.stream.expected == pub.seq and not sub.state.stream.replaying


def test_garbage_is_counted_by_reason_and_the_stream_goes_on(publisher: Publisher) -> None:
    sub = subscribe(publisher)
    try:
        publisher.raw([b"kv", b"\x00" * 8])  # two frames
        publisher.raw([b"kv", b"\x01\x02", batch([stored([1])])])  # a 2-byte seq
        publisher.send(b"\xc1\xc1\xc1")  # not msgpack
        publisher.send(batch([stored([2, 3, 4])])[:-7])  # cut short
        publisher.send(batch([{"type": "BlockPinned", "block_hashes": [9]}, stored([5])]))  # unknown tag
        publisher.send(batch([stored([6])]))
        wait_until(lambda: settled(sub, publisher), "the subscriber settled on the publisher's last batch")
        assert sub.state.problems == {
            "frame_count": 1,
            "bad_seq": 1,
            "malformed": 1,
            "truncated": 1,
            "unknown_event": 1,
        }
        assert cached(sub) == {5, 6}
        assert sub._thread.is_alive()
    finally:
        sub.stop()


def test_a_forced_gap_is_replayed(publisher: Publisher) -> None:
    sub = subscribe(publisher)
    try:
        publisher.send(batch([stored([1, 2])]))
        gap = publisher.skip(batch([stored([3], parent=2), removed([1])]))
        publisher.send(batch([stored([4], parent=3)]))
        wait_until(lambda: settled(sub, publisher), "the subscriber settled on the publisher's last batch")
        assert cached(sub) == {2, 3, 4}
        assert gap in publisher.replay_requests
        assert sub.state.problems == {"gap": 1} and sub.state.stream.replayed >= 2
    finally:
        sub.stop()


def test_a_high_water_mark_drop_is_recovered_by_replay() -> None:
    """The subscriber is held (its state lock taken) while ~10 MB of batches go out through
    sockets that queue 20 messages each way: once the TCP buffers are full too, ZeroMQ drops
    at the PUB side; the subscriber sees the gap when it resumes and replays it."""
    pub = Publisher(sndhwm=20)
    sub = subscribe(pub, Limits(rcvhwm=20))
    try:
        with sub.state.lock:
            for i in range(3000):
                pub.send(batch([stored(list(range(100 * i, 100 * i + 100)))]))
            time.sleep(0.2)  # a dwell, not a wait: the I/O threads fill the TCP buffers meanwhile

        def caught_up() -> bool:  # PUB/SUB shows a drop at the tail only with the next batch
            if settled(sub, pub):
                return True
            if not sub.state.stream.replaying:
                pub.send(batch([]))
            return False

        wait_until(caught_up, "the subscriber caught up with the publisher", interval_s=0.2)
        assert cached(sub) == set(range(300_000))
        assert sub.state.problems.get("gap", 0) >= 1 and "lost" not in sub.state.problems
        assert sub.state.stream.replayed > 0
    finally:
        sub.stop()
        pub.close()


def test_a_replay_slower_than_the_timeout_but_still_arriving_is_not_cut(publisher: Publisher) -> None:
    """The timeout is for a publisher that stopped answering: ten replayed batches 0.15 s apart
    take three times the 0.5 s timeout, and every one is applied (a fixed deadline from the
    request dropped the tail of large replays on a busy machine)."""
    sub = subscribe(publisher, Limits(replay_timeout_s=0.5))
    try:
        publisher.replay_pace_s = 0.15
        publisher.send(batch([stored([0])]))
        for i in range(1, 11):
            publisher.skip(batch([stored([i])]))
        publisher.send(batch([stored([11])]))
        wait_until(lambda: settled(sub, publisher), "the subscriber settled on the publisher's last batch")
        assert cached(sub) == set(range(12))
        assert sub.state.problems == {"gap": 1} and sub.state.stream.replayed >= 10
    finally:
        sub.stop()


def test_a_restarted_publisher_resets_the_state(publisher: Publisher) -> None:
    sub = subscribe(publisher)
    try:
        for i in range(5):
            publisher.send(batch([stored([i])]))
        wait_until(lambda: settled(sub, publisher), "the subscriber settled on the publisher's last batch")
        endpoint = publisher.endpoint
        publisher.close()
        wait_until(lambda: not sub.state.connected, "the subscriber to see the publisher gone")
        again = Publisher()
        again.pub.close(linger=0)
        again.pub = again.ctx.socket(zmq.PUB)
        again.pub.bind(endpoint)  # the same address, a new process: seq starts at 0
        try:
            wait_until(lambda: sub.state.connected, "the subscriber reconnected")

            def rejoined() -> bool:  # the slow joiner again
                again.send(batch([stored([77])]))
                return 77 in cached(sub)

            wait_until(rejoined, "block 77 from the new publisher", interval_s=0.02)
            assert cached(sub) == {77}
            assert sub.state.problems.get("restart") == 1 and sub.state.disconnects >= 1
        finally:
            again.close()
    finally:
        sub.stop()


def test_a_publisher_that_stops_answering_replays_is_given_up_on(publisher: Publisher) -> None:
    sub = subscribe(publisher, Limits(replay_timeout_s=0.5))
    try:
        publisher.answer_replays = False
        publisher.send(batch([stored([1])]))
        publisher.skip(batch([stored([2])]))
        publisher.send(batch([stored([3])]))
        wait_until(
            lambda: sub.state.problems.get("replay_timeout"), "a replay timeout counted", ok=lambda n: n == 1
        )
        wait_until(lambda: settled(sub, publisher), "the subscriber settled on the publisher's last batch")
        assert cached(sub) == {1, 3} and sub.state.problems["lost"] == 1
        publisher.close()
        wait_until(lambda: not sub.state.connected, "the subscriber to see the publisher gone")
        assert sub._thread.is_alive()
    finally:
        sub.stop()


def test_without_a_replay_endpoint_gaps_are_lost(publisher: Publisher) -> None:
    sub = subscribe(publisher, replay=False)
    try:
        publisher.skip(batch([stored([2])]))
        publisher.send(batch([stored([3])]))
        wait_until(lambda: settled(sub, publisher), "the subscriber settled on the publisher's last batch")
        assert sub.state.problems == {"gap": 1, "lost": 1} and publisher.replay_requests == []
    finally:
        sub.stop()


def test_a_subscriber_that_cannot_bind_says_so() -> None:
    pub = Publisher()
    try:
        taken = pub.endpoint  # already bound by the publisher
        with pytest.raises(SubscriberError, match="cannot bind"):
            Subscriber(SourceState(KvEventsSource("x", taken, bind=True))).start()
    finally:
        pub.close()
