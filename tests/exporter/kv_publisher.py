"""A KV event publisher speaking vLLM >= 0.26's ZeroMQ protocol, for the exporter's tests.

Why a stand-in: vLLM cannot run here, and the exporter's tests may not import the bundled
engine (the slim sidecar environment). It does exactly what vLLM's ZmqEventPublisher does on
the wire (docs/reference/vllm-kv-events.md): PUB `[topic, seq (8 bytes BE), payload]`, a
ROUTER that answers `[id, b"", start]` with `[id, b"", topic, seq, payload]` per kept batch
and `[id, b"", b"", ff*8, b""]`, a bounded replay buffer. Payloads are given as bytes (the
committed fixtures, or batches encoded here with plain msgpack maps). The integration
tests check the exporter against the bundled engine's real publisher.

Unlike vLLM's, it sends from the caller's thread (tests decide exactly what goes out, and
can send raw frames) and serves replay from a thread of its own.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import msgspec
import zmq

END_SEQ = b"\xff" * 8


def stored(hashes: list[int], parent: int | None = None, block_size: int = 16, **extra) -> dict:
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": list(range(len(hashes) * block_size)),
        "block_size": block_size,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": [None] * len(hashes),
        "group_idx": 0,
        **extra,
    }


def removed(hashes: list[int], **extra) -> dict:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU", "group_idx": 0, **extra}


def batch(events: list[dict], ts: float = 1767225600.0, rank: int | None = 0) -> bytes:
    return msgspec.msgpack.encode([ts, events, rank])


class Publisher:
    def __init__(self, topic: str = "kv", buffer_steps: int = 10_000, sndhwm: int = 100_000) -> None:
        self.ctx = zmq.Context()
        self.topic = topic.encode()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.SNDHWM, sndhwm)
        self.pub.bind("tcp://127.0.0.1:*")
        self.endpoint = self.pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.SNDHWM, 2 * (buffer_steps + 1))  # as vLLM's: a replay is never cut
        self.router.bind("tcp://127.0.0.1:*")
        self.replay_endpoint = self.router.getsockopt_string(zmq.LAST_ENDPOINT)
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self.seq = 0
        self.replay_requests: list[int] = []
        self.answer_replays = True
        self.replay_pace_s = 0.0  # a pause before each replayed batch (a slow, busy publisher)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve_replay, daemon=True)
        self._thread.start()

    def send(self, payload: bytes, keep: bool = True) -> int:
        """Publish the next batch (kept for replay unless `keep` is False)."""
        with self._lock:
            seq = self.seq
            self.seq += 1
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
            if keep:
                self.buffer.append((seq, payload))
        return seq

    def skip(self, payload: bytes) -> int:
        """A batch the subscriber never sees live (a high-water-mark drop): replay only."""
        with self._lock:
            seq = self.seq
            self.seq += 1
            self.buffer.append((seq, payload))
        return seq

    def raw(self, frames: list[bytes]) -> None:
        self.pub.send_multipart(frames)

    def _serve_replay(self) -> None:
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(50):
                continue
            frames = self.router.recv_multipart()
            if len(frames) != 3:
                continue
            client, _, start = frames
            self.replay_requests.append(int.from_bytes(start, "big"))
            if not self.answer_replays:
                continue
            with self._lock:
                kept = list(self.buffer)
            for seq, payload in kept:
                if seq >= int.from_bytes(start, "big"):
                    time.sleep(self.replay_pace_s)
                    self.router.send_multipart([client, b"", self.topic, seq.to_bytes(8, "big"), payload])
            self.router.send_multipart([client, b"", b"", END_SEQ, b""])

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.pub.close(linger=0)
        self.router.close(linger=0)
        self.ctx.term()


def feed_until_cached(
    sub_port: int, api_port: int, alive, topic: bytes = b"", timeout_s: float = 30.0
) -> dict:
    """Connect a PUB to a subscriber bound on `sub_port` and publish one stored block every
    0.1 s until the exporter on `api_port` shows a cached block; its /api/v1/kv_events answer.
    AssertionError when `alive()` turns False or the time runs out."""
    import json
    import urllib.request

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.connect(f"tcp://127.0.0.1:{sub_port}")
    try:
        deadline, seq = time.monotonic() + timeout_s, 0
        while time.monotonic() < deadline and alive():
            pub.send_multipart([topic, seq.to_bytes(8, "big"), batch([stored([seq + 1])])])
            seq += 1
            time.sleep(0.1)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/api/v1/kv_events", timeout=2) as r:
                    data = json.loads(r.read())
            except OSError:
                continue
            if data["instances"] and data["instances"][0]["cached_blocks"] > 0:
                return data
        raise AssertionError("the exporter exited" if not alive() else "no events")
    finally:
        pub.close(linger=0)
        ctx.term()
