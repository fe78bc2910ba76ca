"""Stale keep-alive connections: a request whose pooled connection the server had already
closed is sent once more, on a fresh connection, instead of being counted as failed.

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

from geventhttpclient.response import HTTPConnectionClosed


def closed_before_response(error: BaseException | None) -> bool:
    return isinstance(error, HTTPConnectionClosed)


def drop_pooled_connections(session: Any) -> None:
    """Close every pooled connection of a Locust FastHttpSession: the retry opens a new one
    (another idle connection in the pool could be just as stale)."""
    session.client.clientpool.close()
