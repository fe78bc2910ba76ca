"""The ZeroMQ side of one source: a SUB socket (connect, or bind with `bind`), a DEALER for
replay requests made when needed, and a monitor that tells connects from disconnects.

Runs in its own thread with blocking polls (100 ms, so `stop()` is prompt); the state it
feeds is guarded by `SourceState.lock`. A replay request left unanswered for
`replay_timeout_s` (the publisher went away; the clock restarts with every replayed message,
so a long replay that is still arriving is never cut) is given up: the DEALER is closed (dropping the
queued request) and the missing batches count as lost. A vanished publisher is not an
error: the SUB socket reconnects by itself, and a restarted one shows as a sequence that
starts again. Nothing a publisher sends can end the thread.
"""

from __future__ import annotations

import logging
import threading
import time

import zmq
from zmq.utils.monitor import parse_monitor_message

from exporter.kv_events.source import SourceState

log = logging.getLogger("kvscope.exporter.kv_events")
POLL_MS = 100
UP_EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_ACCEPTED
DOWN_EVENTS = zmq.EVENT_DISCONNECTED


class SubscriberError(RuntimeError):
    """The SUB socket could not bind or connect (a bad address, a port in use)."""


class Subscriber:
    def __init__(self, state: SourceState) -> None:
        self.state = state
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"kv-events-{state.source.name}", daemon=True)
        self.bound_endpoint: str | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> Subscriber:
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            source = self.state.source
            how = "bind" if source.bind else "connect to"
            raise SubscriberError(f"--kv-events {source.name}: cannot {how} {source.endpoint}: {self._error}")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _main(self) -> None:
        ctx = zmq.Context()
        try:
            self._loop(ctx)
        except BaseException as exc:  # noqa: BLE001 - a socket setup failure is reported to start()
            self._error = exc
            self._ready.set()
            if not isinstance(exc, zmq.ZMQError):
                log.exception("KV event subscriber %s failed", self.state.source.name)
        finally:
            ctx.destroy(linger=0)

    def _loop(self, ctx: zmq.Context) -> None:
        source, state = self.state.source, self.state
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.RCVHWM, state.limits.rcvhwm)
        sub.setsockopt(zmq.SUBSCRIBE, source.topic.encode())
        monitor = sub.get_monitor_socket(UP_EVENTS | DOWN_EVENTS)
        if source.bind:
            sub.bind(source.endpoint)
            self.bound_endpoint = sub.getsockopt_string(zmq.LAST_ENDPOINT)
        else:
            sub.connect(source.endpoint)
        self._ready.set()
        dealer: zmq.Socket | None = None
        deadline = 0.0
        poller = zmq.Poller()
        poller.register(sub, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        while not self._stop.is_set():
            ready = dict(poller.poll(POLL_MS))
            if monitor in ready:
                self._monitor(monitor)
            if sub in ready:
                start = self._drain_live(sub)
                if start is not None:
                    dealer = self._request_replay(ctx, poller, dealer, start)
                    deadline = time.monotonic() + state.limits.replay_timeout_s
            if dealer is not None and dealer in ready:
                # the publisher is answering: a long replay (thousands of batches, applied
                # on a busy machine) may take longer than the timeout, and is not given up
                deadline = time.monotonic() + state.limits.replay_timeout_s
                if self._drain_replay(dealer):
                    poller.unregister(dealer)
                    dealer.close(linger=0)
                    dealer = None
            if dealer is not None and time.monotonic() > deadline:
                with state.lock:
                    state.stream.replay_done(timed_out=True)
                poller.unregister(dealer)
                dealer.close(linger=0)
                dealer = None

    def _drain_live(self, sub: zmq.Socket) -> int | None:
        """Everything queued on the SUB socket (in one lock), or until a replay is needed."""
        state = self.state
        with state.lock:
            while True:
                try:
                    frames = sub.recv_multipart(zmq.NOBLOCK, copy=True)
                except zmq.Again:
                    return None
                start = state.live_frames(frames, time.time())
                if start is not None:
                    return start

    def _request_replay(
        self, ctx: zmq.Context, poller: zmq.Poller, dealer: zmq.Socket | None, start: int
    ) -> zmq.Socket:
        if dealer is None:
            dealer = ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.setsockopt(zmq.RCVHWM, self.state.limits.rcvhwm)  # a replay answers in one burst
            dealer.connect(self.state.source.replay)  # type: ignore[arg-type]
            poller.register(dealer, zmq.POLLIN)
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        return dealer

    def _drain_replay(self, dealer: zmq.Socket) -> bool:
        state = self.state
        with state.lock:
            while True:
                try:
                    frames = dealer.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    return False
                if state.replay_frames(frames):
                    return True

    def _monitor(self, monitor: zmq.Socket) -> None:
        while True:
            try:
                event = parse_monitor_message(monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return
            with self.state.lock:
                if event["event"] & UP_EVENTS:
                    self.state.connected = True
                elif event["event"] & DOWN_EVENTS:
                    self.state.connected = False
                    self.state.disconnects += 1
