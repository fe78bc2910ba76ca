"""Read a streamed response body off its socket, a read at a time, into the SSE fast path
(`harness.workload.sse_blocks`).

Why not `readline`: per streamed chunk, geventhttpclient's `readline(b"\\n")` is called twice
(the `data:` line and the blank line after it), each a search and a copy, and every socket
read under a timeout builds, starts and cancels a gevent `Timeout` (pure Python). At 256
streams that was about a third of the worker's CPU per chunk. Here each read feeds the HTTP
parser once and every complete line is taken at once; the socket has no timeout while the
body streams, and `IdleDeadline` keeps `--request-timeout`'s meaning (that long without a
byte from the server) with one timer per request that is moved only when it fires. A
plain TCP socket is read with `os.read` and an io watcher of its own (see `_read_body`).

It reads geventhttpclient's response parser state (`_sock`, `_body_buffer`, `feed`,
`message_complete`, `block_size`): not public API, so a response without them is read line
by line by the reference reader (`sse.consume`), and the records are the same either way
(tested on recorded stream bytes). On a read error the connection is closed, never returned
to the pool half read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import gevent
import gevent.socket

from harness.workload.record import RequestRecord
from harness.workload.sse import StreamState, consume
from harness.workload.sse_blocks import take_lines

_PARSER_STATE = ("_sock", "_body_buffer", "feed", "message_complete", "block_size")


class IdleDeadline:
    """Raise TimeoutError in the reading greenlet once `seconds` pass with no byte read.

    The reader sets `last` after every read (a float store); the timer fires at the earliest
    possible deadline and, if bytes came since, is set again for the rest. So a request costs
    one timer, not one per read (gevent's own socket timeouts start one for every wait).
    """

    def __init__(self, seconds: float, clock: Callable[[], float]) -> None:
        self.seconds = seconds
        self.clock = clock
        self.last = clock()
        self._greenlet = gevent.getcurrent()
        self._loop = gevent.get_hub().loop
        self._timer: Any = None
        self._arm(seconds)

    def _arm(self, after: float) -> None:
        self._timer = self._loop.timer(max(after, 0.001))
        self._timer.start(self._expired, update=True)

    def _expired(self) -> None:
        self._timer.close()
        idle = self.clock() - self.last
        if idle >= self.seconds:
            self._timer = None
            self._greenlet.throw(TimeoutError(f"no byte from the server for {idle:.1f} s"))
        else:
            self._arm(self.seconds - idle)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer.close()
            self._timer = None

    def __enter__(self) -> IdleDeadline:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def read_stream(
    resp: Any, clock: Callable[[], float], state: StreamState, rec: RequestRecord, idle_timeout_s: float
) -> None:
    """`sse.consume` for a geventhttpclient response: read until `[DONE]` or the end of the
    body. Exceptions from the socket or the HTTP parser propagate (the caller classifies
    them); malformed JSON is a stream error in `state.error`."""
    if not all(hasattr(resp, name) for name in _PARSER_STATE):
        consume(resp.readline, clock, state, rec)
        return
    buf = resp._body_buffer
    # bytes that came with the headers
    if take_lines(buf, clock(), state, rec) or resp.message_complete:
        state.end = clock()
        return
    sock = resp._sock
    if sock is None:
        raise ConnectionError("connection closed before the body")
    timeout = sock.gettimeout()
    try:
        sock.settimeout(None)
        with IdleDeadline(idle_timeout_s, clock) as idle:
            _read_body(resp, sock, buf, clock, idle, state, rec)
        sock.settimeout(timeout)
    except BaseException:
        sock.close()
        raise
    state.end = clock()


def _read_body(resp: Any, sock: Any, buf: bytearray, clock: Callable[[], float], idle: IdleDeadline,
               state: StreamState, rec: RequestRecord) -> None:  # fmt: skip
    """Plain TCP: `os.read` on the (non-blocking) socket, and between reads a switch to the
    hub, which switches back when an io watcher of our own, started once for the whole body,
    sees the socket readable. So a chunk costs one read and one round trip through the hub.
    gevent's `recv` tries first and waits on EAGAIN (a failed system call and an exception
    per chunk) and starts and stops a watcher per wait: together ~5 us per chunk at 256
    streams. TLS sockets (the bytes must be decrypted) are read with their own `recv`."""
    size, feed = resp.block_size, resp.feed
    raw = type(sock) is gevent.socket.socket
    hub = gevent.get_hub()
    fd = sock.fileno()
    watcher = hub.loop.io(fd, 1) if raw else None
    if watcher is not None:
        # Level-triggered: fires (switching to this greenlet) whenever unread bytes are there
        # and this greenlet waits in `hub.switch()`; it never waits anywhere else in this loop.
        watcher.start(gevent.getcurrent().switch)
    wait = hub.switch
    try:
        while True:
            if raw:
                try:
                    data = os.read(fd, size)
                except BlockingIOError:
                    wait()
                    continue
            else:
                data = sock.recv(size)
            idle.last = now = clock()
            feed(data)  # an empty read is the end of the connection: the parser decides
            if take_lines(buf, now, state, rec) or resp.message_complete:
                return
            if not data:
                raise ConnectionError("connection closed mid-stream")
            if raw and len(data) < size:
                wait()  # the kernel had no more: read again once it has
    finally:
        if watcher is not None:
            watcher.stop()
            watcher.close()
