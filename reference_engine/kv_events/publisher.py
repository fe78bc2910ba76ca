"""The ZeroMQ publisher: a PUB socket for live batches and a ROUTER socket for replay, served
by one thread, as vLLM's `ZmqEventPublisher` does.

Wire (vLLM >= 0.26):
- PUB message: `[topic, seq, payload]`; seq is 8 bytes big-endian unsigned, 0 for the
  first batch of this publisher, +1 per batch; payload is one msgpack `KVEventBatch`.
- Replay: a client sends its start seq (8 bytes big-endian) on a REQ socket (or
  `[b"", start]` on a DEALER). The ROUTER answers each kept batch with seq >= start as
  `[topic, seq, payload]`, then the end marker `[b"", ff*8, b""]`. Requests with any other
  frame count are ignored. A start older than the buffer starts at the oldest kept batch.

Why a thread: the scheduler only enqueues (`publish`); encoding and sending happen off the
step. The queue is bounded (`max_queue_size`): a publisher that cannot keep up makes
`publish` wait, as vLLM's does, rather than drop silently; drops happen only at the PUB
socket's high-water mark, where a subscriber sees them as a sequence gap and can replay.

`drain` waits until everything queued has been sent: a simulator replay in virtual time
publishes thousands of batches in about a second, more than `shutdown`'s one second of
grace sends on a busy machine. `shutdown` closes the PUB socket with that same grace as its
linger, so batches already handed to ZeroMQ still reach a connected subscriber.

Each publisher owns its ZeroMQ context (no process-wide instance), so several engines in
one process (tests) never share sockets.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from itertools import count

import msgspec
import zmq

from reference_engine.kv_events.config import KVEventsConfig, binds, offset_endpoint
from reference_engine.kv_events.events import EventBatch

log = logging.getLogger("kvscope.kv_events")

END_SEQ = (-1).to_bytes(8, "big", signed=True)
POLL_S = 0.1
SHUTDOWN_TIMEOUT_S = 1.0


class ZmqEventPublisher:
    """`endpoint` / `replay_endpoint` are the bound or connected addresses after the
    data-parallel port offset; a bound `tcp://host:*` reads back as its chosen port."""

    def __init__(self, config: KVEventsConfig, data_parallel_rank: int = 0) -> None:
        self.data_parallel_rank = data_parallel_rank
        self._config = config
        self._queue: queue.Queue[EventBatch | None] = queue.Queue(maxsize=config.max_queue_size)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._topic = config.topic.encode("utf-8")
        self._seq = count()
        self._queued = 0
        self._sent = 0  # batches through the PUB socket (or given up on): drain's measure
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._replay: zmq.Socket | None = None
        try:
            endpoint = offset_endpoint(config.endpoint, data_parallel_rank) or config.endpoint
            if binds(endpoint):
                self._pub.bind(endpoint)
                endpoint = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
            else:
                self._pub.connect(endpoint)
            self.endpoint = endpoint
            self.replay_endpoint: str | None = None
            replay = offset_endpoint(config.replay_endpoint, data_parallel_rank)
            if replay is not None:
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.setsockopt(zmq.SNDHWM, 2 * (config.buffer_steps + 1))
                self._replay.bind(replay)
                self.replay_endpoint = self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
        except zmq.ZMQError:
            self._close_sockets()
            raise
        self._running = True
        self._thread = threading.Thread(target=self._serve, name="kvscope-kv-events", daemon=True)
        self._thread.start()

    def stated_config(self) -> dict:
        """What vLLM's `get_publisher_config` states (served as GET /kv_event_sources): the config
        with this rank's endpoints, each as configured unless its port was left to the OS
        (`:0`, `:*`), which reads back as the port bound."""
        c = self._config
        return {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": _as_stated(offset_endpoint(c.endpoint, self.data_parallel_rank), self.endpoint),
            "replay_endpoint": _as_stated(
                offset_endpoint(c.replay_endpoint, self.data_parallel_rank), self.replay_endpoint
            ),
            "buffer_steps": c.buffer_steps,
            "hwm": c.hwm,
            "max_queue_size": c.max_queue_size,
            "topic": c.topic,
        }

    def publish(self, batch: EventBatch) -> None:
        """Queue one batch (blocks while the queue is full). The rank is filled in here."""
        if not self._running:
            raise RuntimeError("the KV event publisher is closed")
        if batch.data_parallel_rank is None:
            batch.data_parallel_rank = self.data_parallel_rank
        self._queue.put(batch)
        self._queued += 1

    def drain(self, timeout_s: float) -> bool:
        """Wait until every batch queued so far has been sent; False if `timeout_s` ran out."""
        deadline = time.monotonic() + timeout_s
        while self._sent < self._queued:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def shutdown(self) -> None:
        """Send what is queued (for up to a second), then close the sockets."""
        if not self._running:
            return
        self._running = False
        self._queue.put(None)
        self._thread.join(SHUTDOWN_TIMEOUT_S + POLL_S)
        if self._thread.is_alive():
            log.warning("KV event publisher: %d batches unsent at shutdown", self._queue.qsize())
        self._close_sockets()

    def _close_sockets(self) -> None:
        self._pub.close(linger=int(SHUTDOWN_TIMEOUT_S * 1000))
        if self._replay is not None:
            self._replay.close(linger=0)
        self._ctx.term()

    def _serve(self) -> None:
        encoder = msgspec.msgpack.Encoder()
        while True:
            if self._replay is not None and self._replay.poll(0):
                try:
                    self._answer_replay()
                except zmq.ZMQError:
                    log.exception("KV event publisher: replay failed")
            try:
                batch = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                continue
            if batch is None:
                return
            seq = next(self._seq)
            payload = encoder.encode(batch)
            try:
                self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
            except zmq.ZMQError:
                log.exception("KV event publisher: send failed (seq %d kept for replay)", seq)
            self._buffer.append((seq, payload))
            self._sent += 1

    def _answer_replay(self) -> None:
        frames = self._replay.recv_multipart()  # type: ignore[union-attr]
        if len(frames) != 3:
            log.warning("KV event publisher: ignored a replay request of %d frame(s)", len(frames))
            return
        client, _, start_bytes = frames
        start = int.from_bytes(start_bytes, "big")
        for seq, payload in list(self._buffer):
            if seq >= start:
                self._replay.send_multipart((client, b"", self._topic, seq.to_bytes(8, "big"), payload))  # type: ignore[union-attr]
        self._replay.send_multipart((client, b"", b"", END_SEQ, b""))  # type: ignore[union-attr]


def _as_stated(configured: str | None, bound: str | None) -> str | None:
    if configured is None or not configured.endswith((":0", ":*")):
        return configured
    return bound
