"""The reference engine's KV event structures and publisher against vLLM 0.33.0's own bytes
(tests/fixtures/vllm_kv_events, produced by vLLM's structures and publisher).

- Every committed vLLM payload decodes with our structures and re-encodes to the same bytes,
  so field order, tagging, omitted defaults and the uint64 hashes match exactly.
- The publisher frames PUB messages as [topic, 8-byte big-endian seq, payload] from seq 0,
  fills in the data-parallel rank, and answers replay requests as vLLM >= 0.26 does (REQ and
  DEALER clients, a start beyond the newest batch, a malformed request ignored).
- `--kv-events-config` takes vLLM's JSON with its defaults, refuses unknown keys and types.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
import zmq

from reference_engine.config import ConfigError, EngineConfig
from reference_engine.engine_args import engine_args
from reference_engine.kv_events.config import (
    KVEventsConfig,
    KVEventsConfigError,
    binds,
    offset_endpoint,
    parse_kv_events_config,
)
from reference_engine.kv_events.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventBatch,
    external_hash,
)
from reference_engine.kv_events.publisher import END_SEQ, ZmqEventPublisher
from tests.support.paths import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "vllm_kv_events"
NEW_ERA = sorted(p for p in FIXTURES.glob("*.msgpack") if not p.name.startswith("v0_23"))


@pytest.mark.parametrize("path", NEW_ERA, ids=lambda p: p.stem)
def test_vllm_payloads_reencode_byte_for_byte(path: Path) -> None:
    payload = path.read_bytes()
    batch = msgspec.msgpack.Decoder(KVEventBatch).decode(payload)
    assert msgspec.msgpack.Encoder().encode(batch) == payload


def test_fixture_scenario_decodes_to_the_documented_events() -> None:
    dec = msgspec.msgpack.Decoder(KVEventBatch)
    seq0 = dec.decode((FIXTURES / "pub_seq0.msgpack").read_bytes())
    (stored,) = seq0.events
    assert isinstance(stored, BlockStored)
    assert stored.block_hashes == [7322446309363477352, 17027874615116373601, 8528054903622213768]
    assert stored.parent_block_hash is None and stored.group_idx == 0 and stored.medium == "GPU"
    assert len(stored.token_ids) == 3 * stored.block_size and seq0.data_parallel_rank == 0
    seq2 = dec.decode((FIXTURES / "pub_seq2.msgpack").read_bytes())
    assert [type(e) for e in seq2.events] == [BlockRemoved, BlockRemoved, BlockStored]
    assert isinstance(dec.decode((FIXTURES / "pub_seq4.msgpack").read_bytes()).events[0], AllBlocksCleared)
    assert dec.decode((FIXTURES / "dp1_batch0.msgpack").read_bytes()).data_parallel_rank == 1


def test_external_hash_is_the_digests_low_64_bits_unsigned() -> None:
    digest = bytes(range(24)) + b"\xff" * 8
    assert external_hash(digest) == 2**64 - 1 == int.from_bytes(digest, "big") & (2**64 - 1)


def test_config_defaults_are_vllms() -> None:
    c = parse_kv_events_config('{"enable_kv_cache_events": true}')
    assert c == KVEventsConfig(enable_kv_cache_events=True)
    assert (c.publisher_name, c.endpoint, c.replay_endpoint) == ("zmq", "tcp://*:5557", None)
    assert (c.buffer_steps, c.hwm, c.max_queue_size, c.topic) == (10_000, 100_000, 100_000, "")
    assert (
        parse_kv_events_config("{}").publisher_name == "null" and not parse_kv_events_config("{}").publishes
    )
    assert not parse_kv_events_config('{"enable_kv_cache_events": true, "publisher": "null"}').publishes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ("[1]", "JSON object"),
        ('{"enable_kv_cache_events": true, "endpiont": "tcp://*:1"}', "unknown key(s) endpiont"),
        ('{"enable_kv_cache_events": "yes"}', "enable_kv_cache_events must be bool"),
        ('{"hwm": true}', "hwm must be int"),
        ('{"enable_kv_cache_events": true, "publisher": "kafka"}', "publisher must be one of"),
        ('{"enable_kv_cache_events": true, "endpoint": "http://x:1"}', "tcp://, ipc:// or inproc://"),
        ('{"buffer_steps": -1}', "buffer_steps must be >= 0"),
    ],
)
def test_config_refuses_what_vllm_refuses(text: str, message: str) -> None:
    with pytest.raises(KVEventsConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_kv_events_config(text)


def test_engine_config_validates_the_flag_and_declares_it_once() -> None:
    with pytest.raises(ConfigError, match="unknown key"):
        EngineConfig(kv_events_config='{"x": 1}').validate()
    with pytest.raises(ConfigError, match="need the prefix cache"):
        EngineConfig(
            kv_events_config='{"enable_kv_cache_events": true}', enable_prefix_caching=False
        ).validate()
    with pytest.raises(ConfigError, match="kv_cache_metrics_sample"):
        EngineConfig(kv_cache_metrics_sample=0.0).validate()
    flags = {a.flag for a in engine_args("engine")}
    assert {"--kv-events-config", "--kv-cache-metrics", "--kv-cache-metrics-sample"} <= flags
    assert EngineConfig(kv_events_config='{"enable_kv_cache_events": false}').kv_events() is None


def test_bind_or_connect_and_data_parallel_offsets_follow_vllm() -> None:
    assert binds("tcp://*:5557") and binds("tcp://[::]:1") and binds("ipc:///tmp/x") and binds("inproc://x")
    assert not binds("tcp://127.0.0.1:5557")
    assert offset_endpoint("tcp://*:5557", 0) == "tcp://*:5557"
    assert offset_endpoint("tcp://*:5557", 2) == "tcp://*:5559"
    assert offset_endpoint("tcp://*:0", 3) == "tcp://*:0"
    assert offset_endpoint("inproc://kv", 1) == "inproc://kv_dp1"
    assert offset_endpoint(None, 1) is None
    with pytest.raises(KVEventsConfigError):
        offset_endpoint("ipc:///tmp/kv", 1)


def _config(**kw) -> KVEventsConfig:
    base = dict(
        enable_kv_cache_events=True, endpoint="tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*"
    )
    return KVEventsConfig(**{**base, **kw})


def _batches(n: int) -> list[KVEventBatch]:
    return [
        KVEventBatch(
            ts=1.0 + i,
            events=[BlockStored([i], None, list(range(4)), 4, None, "GPU", None, [None], 0)],
        )
        for i in range(n)
    ]


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)


def _subscribe(ctx: zmq.Context, endpoint: str, topic: bytes) -> zmq.Socket:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(endpoint)
    return sub


def _recv_all(sock: zmq.Socket, timeout_ms: int = 1000) -> list[list[bytes]]:
    got = []
    while sock.poll(timeout_ms):
        got.append(sock.recv_multipart())
        timeout_ms = 300
    return got


def test_publisher_frames_and_replay_like_vllm(ctx: zmq.Context) -> None:
    publisher = ZmqEventPublisher(_config(topic="kv", buffer_steps=3), data_parallel_rank=0)
    try:
        sub = _subscribe(ctx, publisher.endpoint, b"kv")
        _wait_joined(sub, publisher)
        for batch in _batches(5):
            publisher.publish(batch)
        live = _recv_all(sub)
        assert [f[0] for f in live] == [b"kv"] * 5
        seqs = [int.from_bytes(f[1], "big") for f in live]
        assert all(len(f[1]) == 8 for f in live) and seqs == sorted(seqs) and seqs[-1] - seqs[0] == 4
        decoded = msgspec.msgpack.Decoder(KVEventBatch).decode(live[-1][2])
        assert decoded.data_parallel_rank == 0 and decoded.events[0].block_hashes == [4]

        # A REQ client gets the first reply without the envelope (libzmq's REQ state machine
        # then refuses the rest: a subscriber that wants them all uses a DEALER, as below).
        req = ctx.socket(zmq.REQ)
        req.connect(publisher.replay_endpoint)
        req.send((seqs[-1] - 1).to_bytes(8, "big"))
        assert req.recv_multipart() == [b"kv", (seqs[-1] - 1).to_bytes(8, "big"), live[-2][2]]

        dealer = ctx.socket(zmq.DEALER)
        dealer.connect(publisher.replay_endpoint)
        dealer.send_multipart([b"", (0).to_bytes(8, "big")])  # older than the buffer: its oldest
        frames = _recv_all(dealer)
        assert [int.from_bytes(f[2], "big") for f in frames[:-1]] == seqs[-3:]  # buffer_steps=3
        assert frames[-1] == [b"", b"", END_SEQ, b""]
        dealer.send_multipart([b"", (99).to_bytes(8, "big")])
        assert _recv_all(dealer) == [[b"", b"", END_SEQ, b""]]
        dealer.send_multipart([b"", b"x", b"y"])  # wrong frame count: ignored, no answer
        assert _recv_all(dealer, 400) == []
    finally:
        publisher.shutdown()


def test_sequence_numbers_start_at_zero_per_publisher(ctx: zmq.Context) -> None:
    for _ in range(2):  # a second publisher (a restart) starts at 0 again
        publisher = ZmqEventPublisher(_config())
        try:
            for batch in _batches(2):
                publisher.publish(batch)
            dealer = ctx.socket(zmq.DEALER)
            dealer.connect(publisher.replay_endpoint)
            # publish() only queues: a request that overtakes the sending thread is answered
            # with what was sent so far, so ask again until both batches are in the buffer.
            for _ in range(50):
                dealer.send_multipart([b"", (0).to_bytes(8, "big")])
                got = [f[2] for f in _recv_all(dealer)]
                if len(got) == 3:
                    break
            assert got == [(0).to_bytes(8, "big"), (1).to_bytes(8, "big"), END_SEQ]
            dealer.close(linger=0)
        finally:
            publisher.shutdown()


def _wait_joined(sub: zmq.Socket, publisher: ZmqEventPublisher) -> None:
    """PUB/SUB's slow joiner: publish probes until one arrives, then drain them."""
    for _ in range(50):
        publisher.publish(KVEventBatch(ts=0.0, events=[AllBlocksCleared()]))
        if sub.poll(100):
            break
    _recv_all(sub, 300)


def test_publisher_fills_in_its_rank_and_offsets_its_ports(ctx: zmq.Context) -> None:
    publisher = ZmqEventPublisher(_config(replay_endpoint=None), data_parallel_rank=2)
    try:
        assert publisher.replay_endpoint is None
        sub = _subscribe(ctx, publisher.endpoint, b"")
        _wait_joined(sub, publisher)
        publisher.publish(_batches(1)[0])
        (frames,) = _recv_all(sub)
        assert msgspec.msgpack.Decoder(KVEventBatch).decode(frames[2]).data_parallel_rank == 2
    finally:
        publisher.shutdown()
    with pytest.raises(RuntimeError, match="closed"):
        publisher.publish(_batches(1)[0])


def test_a_connecting_publisher_reaches_a_binding_subscriber(ctx: zmq.Context) -> None:
    """No `*` in the endpoint: the PUB connects (vLLM's rule), so a sidecar can bind loopback."""
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.bind("tcp://127.0.0.1:*")
    endpoint = sub.getsockopt_string(zmq.LAST_ENDPOINT)
    publisher = ZmqEventPublisher(_config(endpoint=endpoint, replay_endpoint=None))
    try:
        assert publisher.endpoint == endpoint
        _wait_joined(sub, publisher)
        publisher.publish(_batches(1)[0])
        assert len(_recv_all(sub)) == 1
    finally:
        publisher.shutdown()


def test_drain_then_shutdown_delivers_every_queued_batch(ctx: zmq.Context) -> None:
    """A replay in virtual time queues batches faster than the sending thread takes them:
    `drain` waits for all of them, and closing does not drop what ZeroMQ still holds."""
    publisher = ZmqEventPublisher(_config(replay_endpoint=None))
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)  # no limit: the test reads only after the publisher closed
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(publisher.endpoint)
    try:
        _wait_joined(sub, publisher)
        for batch in _batches(3000):
            publisher.publish(batch)
        assert publisher.drain(60)
    finally:
        publisher.shutdown()
    assert len(_recv_all(sub, 3000)) == 3000


def test_fixture_json_matches_the_generic_decode() -> None:
    """The fixture's own consistency: its `payload_generic` is the schema-less decode."""
    for path in NEW_ERA:
        doc = json.loads(path.with_suffix(".json").read_text())
        generic = json.loads(msgspec.json.encode(msgspec.msgpack.decode(path.read_bytes())))
        assert doc["payload_generic"] == generic
