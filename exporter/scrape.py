"""Fetch one target's exposition: per-target timeout, body-size cap, gzip, failure reasons.

Invariants:
- `scrape()` never raises (except CancelledError): every failure becomes a ScrapeResult
  with a `reason` from REASONS, so the loop always goes on.
- The size cap holds for the *decompressed* body as well as the bytes on the wire: the
  session runs with `auto_decompress=False` and gzip/deflate is inflated here in bounded
  steps, so a gzip bomb costs at most `max_bytes` of memory.
- Only http and https targets exist: `parse_target` rejects anything else.
"""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.parse
import zlib
from dataclasses import dataclass

import aiohttp

from exporter.defaults import DEFAULT_MAX_BYTES

# Reasons that mark a target down (nothing usable was fetched).
DOWN_REASONS: tuple[str, ...] = (
    "connection_refused",
    "dns",
    "timeout",
    "connection",
    "http_status",
    "not_metrics",
    "too_large",
    "decode",
    "empty",
    "internal",
)
# Reasons counted while the target stays up (the rest of the exposition was used).
PARTIAL_REASONS: tuple[str, ...] = ("malformed_lines", "duplicate_series", "non_finite", "unknown_dialect")
REASONS: tuple[str, ...] = DOWN_REASONS + PARTIAL_REASONS

# Text 0.0.4 only: prometheus_client answers OpenMetrics whenever the Accept header names it at
# all (whatever its q), and then rewrites `vllm:x` to `vllm_x`; servers that speak only
# OpenMetrics (vLLM's Rust frontend) send it anyway, and the parser reads both.
ACCEPT = "text/plain;version=0.0.4;q=1.0,*/*;q=0.1"
HEADERS = {"Accept": ACCEPT, "Accept-Encoding": "gzip, deflate", "User-Agent": "kvscope-exporter/0.1"}


class TargetError(ValueError):
    """A target specification the exporter refuses (bad scheme, no host, bad name)."""


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    url: str


def parse_target(spec: str) -> Target:
    """`[NAME=]URL` -> Target. A URL without a path gets `/metrics`.

    Raises TargetError for any scheme other than http/https and for URLs without a host.
    """
    name, url = None, spec.strip()
    head, sep, tail = url.partition("=")
    if sep and "://" not in head and "/" not in head:
        name, url = head.strip(), tail.strip()
    if "://" not in url:
        raise TargetError(
            f"target {spec!r}: only http and https targets are accepted; give a full URL "
            f"such as http://{url or 'HOST:PORT'}"
        )
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise TargetError(
            f"target {spec!r}: only http and https targets are accepted (got {parts.scheme}://)"
        )
    try:
        host, _ = parts.hostname, parts.port  # .port raises on a bad port
    except ValueError as e:
        raise TargetError(f"target {spec!r}: {e}") from None
    if not host:
        raise TargetError(f"target {spec!r}: the URL has no host")
    if parts.path in ("", "/"):
        url = urllib.parse.urlunsplit(parts._replace(path="/metrics"))
    if name is None:  # host:port, never the user:password@ part of a URL
        name = f"{host}:{parts.port}" if parts.port else host
    if not name or any(c.isspace() for c in name):
        raise TargetError(f"target {spec!r}: the name must be non-empty and without spaces")
    return Target(name, url)


@dataclass(slots=True)
class ScrapeResult:
    """Outcome of one fetch. `text` is set iff `reason` is None."""

    text: str | None
    reason: str | None
    detail: str
    duration: float
    status: int | None = None
    nbytes: int = 0


class _Fail(Exception):
    def __init__(self, reason: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.reason, self.detail, self.status = reason, detail, status


def _inflate(raw: bytes, encoding: str, max_bytes: int) -> bytes:
    if encoding in ("gzip", "x-gzip") or (not encoding and raw[:2] == b"\x1f\x8b"):
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        d = zlib.decompressobj(zlib.MAX_WBITS if raw[:1] == b"\x78" else -zlib.MAX_WBITS)
    elif encoding in ("", "identity"):
        return raw
    else:
        raise _Fail("decode", f"unsupported Content-Encoding {encoding!r}")
    try:
        out = d.decompress(raw, max_bytes + 1)
    except zlib.error as e:
        raise _Fail("decode", f"corrupt {encoding or 'gzip'} body: {e}") from None
    if len(out) > max_bytes or d.unconsumed_tail:
        raise _Fail("too_large", f"decompressed body exceeds {max_bytes} bytes")
    return out


def _check_content(text: str, content_type: str) -> None:
    head = text.lstrip()[:1]
    ctype = content_type.split(";")[0].strip().lower()
    if ctype == "text/html" or head == "<":
        raise _Fail("not_metrics", "HTML instead of metrics (wrong path, or a login/proxy page?)")
    if ctype == "application/json" or head in ("{", "["):
        raise _Fail(
            "not_metrics",
            "JSON instead of metrics (trtllm-serve serves Prometheus text at "
            "/prometheus/metrics; its /metrics is JSON)",
        )
    if not text.strip():
        raise _Fail("empty", "empty body")


async def _fetch(session: aiohttp.ClientSession, url: str, max_bytes: int) -> tuple[str, int, int]:
    async with session.get(url, headers=HEADERS, allow_redirects=True) as resp:
        if resp.status != 200:
            raise _Fail("http_status", f"HTTP {resp.status} {resp.reason or ''}".strip(), resp.status)
        if resp.content_length is not None and resp.content_length > max_bytes:
            raise _Fail("too_large", f"Content-Length {resp.content_length} exceeds {max_bytes} bytes", 200)
        chunks, total = [], 0
        async for chunk in resp.content.iter_chunked(1 << 16):
            total += len(chunk)
            if total > max_bytes:
                raise _Fail("too_large", f"body exceeds {max_bytes} bytes", 200)
            chunks.append(chunk)
        raw = b"".join(chunks)
        body = _inflate(raw, resp.headers.get("Content-Encoding", "").strip().lower(), max_bytes)
        try:
            text = body.decode(resp.charset or "utf-8", errors="replace")
        except LookupError:  # an unknown charset name: metrics are ASCII/UTF-8 anyway
            text = body.decode("utf-8", errors="replace")
        _check_content(text, resp.headers.get("Content-Type", ""))
        return text, resp.status, total


def classify(exc: BaseException) -> tuple[str, str]:
    """Map a client exception to (reason, detail)."""
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return "timeout", "timed out (connect, headers or a slow body)"
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_err = exc.os_error
        if isinstance(os_err, socket.gaierror) or type(exc).__name__ == "ClientConnectorDNSError":
            return "dns", f"cannot resolve host: {os_err}"
        if isinstance(os_err, ConnectionRefusedError):
            return "connection_refused", f"connection refused: {exc.host}:{exc.port}"
        return "connection", f"cannot connect: {os_err}"
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ServerDisconnectedError | aiohttp.ClientOSError):
        return "connection", f"connection broken: {type(exc).__name__}: {exc}"
    if isinstance(exc, aiohttp.ClientResponseError):
        return "http_status", f"bad HTTP response: {exc.status} {exc.message}"
    if isinstance(exc, aiohttp.ClientError | OSError):
        return "connection", f"{type(exc).__name__}: {exc}"
    return "internal", f"{type(exc).__name__}: {exc}"


async def scrape(
    session: aiohttp.ClientSession, target: Target, timeout: float, max_bytes: int = DEFAULT_MAX_BYTES
) -> ScrapeResult:
    """Fetch `target` once within `timeout` seconds (everything included)."""
    start = time.perf_counter()
    try:
        text, status, nbytes = await asyncio.wait_for(_fetch(session, target.url, max_bytes), timeout)
        return ScrapeResult(text, None, "", time.perf_counter() - start, status, nbytes)
    except asyncio.CancelledError:
        raise
    except _Fail as f:
        return ScrapeResult(None, f.reason, f.detail, time.perf_counter() - start, f.status)
    except BaseException as e:  # noqa: BLE001 - the loop must survive anything a target does
        if not isinstance(e, Exception):
            raise
        reason, detail = classify(e)
        return ScrapeResult(None, reason, detail, time.perf_counter() - start)


def make_session(timeout: float) -> aiohttp.ClientSession:
    """Client session for scraping: no automatic decompression (see module docstring)."""
    return aiohttp.ClientSession(
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeout),
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=10),  # one slow target must not queue others
        trust_env=False,
    )
