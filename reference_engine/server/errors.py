"""Errors in OpenAI's wire format: `{"error": {"message", "type", "param", "code"}}`.

Every failure a client can cause is an `APIError` with a 4xx status, raised anywhere in
request handling and turned into JSON by the app's middleware. Anything else that escapes
a handler is a server bug: it becomes a 500 with a generic message (the traceback goes to
the log, never to the client).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from aiohttp import web


@dataclass(slots=True)
class APIError(Exception):
    """A request the server refuses. `type` and `code` follow OpenAI's values where OpenAI
    has one (`invalid_request_error`, `model_not_found`, `invalid_api_key`, ...)."""

    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> web.Response:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else None
        return web.json_response(self.body(), status=self.status, headers=headers, dumps=json.dumps)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def unauthorized() -> APIError:
    # The message never echoes what the client sent: a wrong key may be a real key.
    return APIError(
        401,
        "Invalid or missing API key; send it as 'Authorization: Bearer <key>'.",
        "authentication_error",
        None,
        "invalid_api_key",
    )


def model_not_found(name: str, served: str) -> APIError:
    return APIError(
        404,
        f"The model {name!r} does not exist; this server serves {served!r}.",
        "invalid_request_error",
        "model",
        "model_not_found",
    )


def shutting_down() -> APIError:
    return APIError(
        503,
        "The server is shutting down and accepts no new requests.",
        "service_unavailable",
        None,
        "shutting_down",
    )


def engine_failed() -> APIError:
    return APIError(
        500,
        "The engine failed and can serve no more requests; see the server log.",
        "server_error",
        None,
        "engine_failed",
    )


def engine_dead() -> APIError:
    return APIError(
        503,
        "The engine core process has stopped; this server is shutting down.",
        "service_unavailable",
        None,
        "engine_dead",
    )


def internal_error() -> APIError:
    return APIError(500, "Internal server error; see the server log.", "server_error", None, None)


def from_http_exception(exc: web.HTTPException) -> APIError:
    """aiohttp's own refusals (unknown route, wrong method, body too large) in OpenAI's shape."""
    codes = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
    kind = "invalid_request_error" if exc.status < 500 else "server_error"
    return APIError(exc.status, exc.reason or "HTTP error", kind, None, codes.get(exc.status))


def request_timeout(what: str, seconds: float) -> APIError:
    return APIError(
        408,
        f"The request {what} did not arrive within {seconds:g} s; the connection is closed.",
        "invalid_request_error",
        None,
        "request_timeout",
    )


def too_many_connections(limit: int) -> APIError:
    return APIError(
        503,
        f"The server has {limit} open connections, its limit; retry later.",
        "service_unavailable",
        None,
        "too_many_connections",
    )


def malformed_http(status: int, message: str) -> APIError:
    """A request aiohttp's parser refused before any route saw it (bad request line, headers,
    framing). Status 400, or 431 for a request line or headers over the size limits."""
    code = "request_header_fields_too_large" if status == 431 else "malformed_http_request"
    return APIError(status, message, "invalid_request_error", None, code)
