"""Keep-alive: a finished stream hands its connection back to the pool, and a request whose
pooled connection the server had already closed is sent once more, on a fresh connection,
instead of being counted as failed.

geventhttpclient returns a connection to its pool only once the response is complete: after
`data: [DONE]` the chunked body's last chunk is still unread, so without `finish_body` every
request would leave its connection to be closed and open a new one (seen: about one new
connection per request against llama-server).

llama-server closes a keep-alive connection after 5 s idle (docs/reference/llamacpp-server.md);
a client that reuses it a moment later races that close and its request fails before any
response byte arrives. Nothing reached the engine, so one retry on a fresh connection is
safe, as urllib3 and browsers do. geventhttpclient raises `HTTPConnectionClosed` exactly then:
when the connection ends before the first byte of a response (a reset at that point
included); a connection that drops after bytes arrived raises something else and stays an
error. Its own pool retries such requests only for idempotent methods, never our POSTs.
"""

from __future__ import annotations

from typing import Any

import gevent
from geventhttpclient.response import HTTPConnectionClosed

FINISH_TIMEOUT_S = 1.0  # the rest of a body after [DONE] is a few bytes, sent at once


def closed_before_response(error: BaseException | None) -> bool:
    return isinstance(error, HTTPConnectionClosed)


def drop_pooled_connections(session: Any) -> None:
    """Close every pooled connection of a Locust FastHttpSession: the retry opens a new one
    (another idle connection in the pool could be just as stale)."""
    session.client.clientpool.close()


def finish_body(stream: Any) -> None:
    """Read what is left of a streamed body after [DONE], so its connection is reused; a server
    that keeps sending is given up on after FINISH_TIMEOUT_S (the connection is then closed)."""
    try:
        with gevent.Timeout(FINISH_TIMEOUT_S, False):
            stream.read()
    except Exception:  # noqa: BLE001 - the request is complete; only the connection's reuse is lost
        pass
