"""The HTTP transport's defences against malformed and slow clients (`guarded_runner`).

aiohttp answers a request its parser refuses (a bad request line, an unknown method,
oversized headers, Content-Length with Transfer-Encoding, a bad chunk size) with a
`text/plain` 400 and logs an ERROR with a traceback for each: anyone could flood the log.
It has no header or body read timeout (a slowloris connection or a body shorter than its
Content-Length holds a connection until the hour-long keep-alive timeout) and no cap on
open connections. `GuardedRequestHandler` adds, per connection:

- framing errors answered in OpenAI's JSON error shape (400, or 431 past the size limits),
  each logged as one WARNING line through the server's `RateLimitedLog`;
- a header deadline: request headers complete within `header_timeout_s` of the connection
  opening, or of the first byte after the previous response; else a 408 and close;
- a body deadline: a request body complete within `body_timeout_s` of its headers; else a
  408 (if no response has started) and close; the handler waiting on it sees the connection
  drop, so an unread request never reaches the engine;
- a connection cap: past `max_connections` open ones, a new connection gets a 503 and is
  closed at once;
- `before_request`, called as a request's bytes come in and before aiohttp parses them (the
  server routes the engine core's waiting outputs there: a burst of arrivals is parsed
  within one event-loop iteration, and the streams already running go first).

It builds on `RequestHandler`'s overridable methods (`connection_made`, `data_received`,
`handle_error`, `finish_response`, `connection_lost`), on `Server`'s request factory (the
only per-request hook that sees the body stream) and on two internals: the queue of parsed
messages and its error entries (`_messages`, `_ErrInfo`), to see a body the parser refused
half-way. tests/server/test_server_http_guard.py checks each behaviour against the installed
aiohttp.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from aiohttp import http_exceptions, web
from aiohttp.web_protocol import RequestHandler, _ErrInfo

from reference_engine.serve_options import HttpLimits
from reference_engine.server.errors import (
    APIError,
    internal_error,
    malformed_http,
    request_timeout,
    too_many_connections,
)
from reference_engine.server.log_limit import RateLimitedLog

# How long a refused request's unread body is drained so that the client sees the answer
# before the socket closes (aiohttp's default is 10 s: time a refused client keeps its slot).
LINGER_S = 2.0


def raw_response(error: APIError) -> bytes:
    """A complete `Connection: close` HTTP/1.1 response, for writing straight to a transport
    when no request object exists (a refused connection, headers that never completed)."""
    body = json.dumps(error.body()).encode()
    head = (
        f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def framing_error(exc: BaseException | None, limits_line: int) -> APIError:
    """The parser's exception as an OpenAI error. Messages are ours plus the parser's first
    line (never the request bytes the parser quotes after it)."""
    if isinstance(exc, http_exceptions.LineTooLong):
        return malformed_http(431, f"The request line or a header is longer than {limits_line} bytes.")
    detail = getattr(exc, "message", "") or ""
    first = str(detail).splitlines()[0].rstrip(": ") if detail else ""
    if "Too many headers" in first:
        return malformed_http(431, "The request has too many headers.")
    if isinstance(exc, http_exceptions.BadHttpMethod) and "HTTPS" not in first:
        return malformed_http(400, "Unknown or malformed HTTP method.")
    return malformed_http(400, f"Malformed HTTP request: {first or type(exc).__name__}.")


class GuardedServer(web.Server):
    """aiohttp's `Server` with `GuardedRequestHandler` connections, built from the plain one
    an `AppRunner` makes (same handler, request factory and settings)."""

    def __init__(
        self,
        plain: web.Server,
        limits: HttpLimits,
        log: RateLimitedLog,
        before_request: Callable[[], None] | None = None,
    ) -> None:
        # `_kwargs` and `_loop` are the plain server's own settings (access log, debug, ...).
        kwargs = {**plain._kwargs, "keepalive_timeout": limits.keep_alive_timeout_s}
        kwargs["lingering_time"] = min(LINGER_S, limits.body_timeout_s)
        super().__init__(
            plain.request_handler,
            request_factory=self._new_request,
            handler_cancellation=plain.handler_cancellation,
            loop=plain._loop,
            **kwargs,
        )
        self._make_plain_request = plain.request_factory
        self.limits = limits
        self.log = log
        self.before_request = before_request

    def _new_request(self, message, payload, protocol, writer, task) -> web.BaseRequest:
        if isinstance(protocol, GuardedRequestHandler):
            protocol.request_started(payload, writer)
        return self._make_plain_request(message, payload, protocol, writer, task)

    def __call__(self) -> RequestHandler:
        return GuardedRequestHandler(self, loop=self._loop, **self._kwargs)


class GuardedRequestHandler(RequestHandler):
    """One connection, with the deadlines and the cap of the module doc.

    State: `_busy` from a request's headers to the end of its response; `_body` the body
    still arriving (None once complete); at most one of the two timers is armed for a phase
    (headers pending, or body pending)."""

    __slots__ = ("_guard", "_header_timer", "_body_timer", "_linger_timer", "_body", "_writer", "_busy")

    def __init__(self, manager: GuardedServer, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = manager
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None  # set once the guard is closing it
        self._body: Any = None
        self._writer: Any = None
        self._busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        over = len(self._guard.connections) >= self._guard.limits.max_connections
        super().connection_made(transport)
        if over:
            self._guard.log.warning(
                "refused a connection from %s: %d connections open (--max-connections)",
                _peer(transport),
                self._guard.limits.max_connections,
            )
            self._close_with(too_many_connections(self._guard.limits.max_connections))
            return
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self._linger_timer is not None:
            return  # answered and closing: what the client still sends is dropped
        if not self._busy and self._body is None:
            # A request's bytes, before it is parsed: the server's own work goes first.
            if self._guard.before_request is not None:
                self._guard.before_request()
            # The first byte of a request after the previous response starts its header deadline.
            if data and self._header_timer is None:
                self._arm_header_timer()
        queued = len(self._messages)
        super().data_received(data)
        if self._body is None:
            return
        if len(self._messages) > queued and isinstance(self._messages[-1][0], _ErrInfo):
            # The parser refused the rest of a body being read (a bad chunk size): aiohttp
            # queues the error as a next request and leaves the handler waiting on the body.
            error = framing_error(self._messages[-1][0].exc, self.max_line_size)
            self._guard.log.warning(
                "refused a malformed request body from %s: %s", _peer(self.transport), error.message
            )
            self._close_with(error if self._unanswered() else None)
        elif self._body.is_eof():
            self._body_complete()

    def request_started(self, payload: Any, writer: Any) -> None:
        """Headers parsed (or refused by the parser): the header deadline is met."""
        self._busy = True
        self._writer = writer
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        if not payload.is_eof():
            self._body = payload
            self._body_timer = self._loop.call_later(self._guard.limits.body_timeout_s, self._body_too_slow)

    async def finish_response(self, request, resp, start_time):  # type: ignore[no-untyped-def]
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self._busy = False

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, ConnectionError):
            raise exc  # the client left; aiohttp's loop drops the connection quietly
        if status >= 500:
            # Not the client's doing: a bug, worth its traceback (the app's middleware turns
            # handler errors into JSON 500s before they get here).
            self.log_exception("error handling request from %s", request.remote, exc_info=exc)
            error = internal_error() if status == 500 else APIError(status, "Gateway timeout", "server_error")
        else:
            error = framing_error(exc, self.max_line_size)
            self._guard.log.warning("refused a malformed request from %s: %s", request.remote, error.message)
        if request.writer.output_size > 0:
            raise ConnectionError("the response has started; the connection is dropped instead")
        resp = error.response()
        resp.force_close()
        return resp

    def connection_lost(self, exc: BaseException | None) -> None:
        for timer in (self._header_timer, self._body_timer, self._linger_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._body_timer = self._linger_timer = None
        self._body = self._writer = None
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._header_timer = self._loop.call_later(
            self._guard.limits.header_timeout_s, self._headers_too_slow
        )

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self._busy or self.transport is None:
            return
        seconds = self._guard.limits.header_timeout_s
        self._guard.log.warning(
            "closed a connection from %s: request headers not complete within %g s (--header-timeout)",
            _peer(self.transport),
            seconds,
        )
        self._close_with(request_timeout("headers", seconds))

    def _body_complete(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
        self._body_timer = self._body = None

    def _body_too_slow(self) -> None:
        self._body_timer = None
        if self._body is None or self._body.is_eof() or self.transport is None:
            return
        seconds = self._guard.limits.body_timeout_s
        self._guard.log.warning(
            "closed a connection from %s: request body not complete within %g s (--body-timeout)",
            _peer(self.transport),
            seconds,
        )
        self._close_with(request_timeout("body", seconds) if self._unanswered() else None)

    def _unanswered(self) -> bool:
        """A request is being handled and no byte of its response is written yet."""
        return self._busy and self._writer is not None and self._writer.output_size == 0

    def _close_with(self, error: APIError | None) -> None:
        """Answer `error` and close. Closing a socket with unread input resets it, which can
        destroy the answer before the client reads it; so after the answer the write side is
        shut and input is drained for up to LINGER_S (or until the client closes)."""
        if error is None or self.transport is None:
            self.force_close()
            return
        self.transport.write(raw_response(error))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger_timer = self._loop.call_later(LINGER_S, self.force_close)


def _peer(transport: asyncio.BaseTransport | None) -> str:
    peer = transport.get_extra_info("peername") if transport is not None else None
    return str(peer[0]) if isinstance(peer, tuple) else "an unknown peer"


class GuardedAppRunner(web.AppRunner):
    """`web.AppRunner` whose connections are `GuardedRequestHandler`s."""

    def __init__(
        self,
        app: web.Application,
        limits: HttpLimits,
        log: RateLimitedLog,
        before_request: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(app, **kwargs)
        self._limits = limits
        self._log = log
        self._before_request = before_request

    async def _make_server(self) -> web.Server:
        return GuardedServer(await super()._make_server(), self._limits, self._log, self._before_request)
