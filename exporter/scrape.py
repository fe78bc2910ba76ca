"""Fetch one target's exposition: per-target timeout, body-size cap, gzip, credentials,
redirects, TLS, failure reasons.

Invariants:
- `scrape()` never raises (except CancelledError): every failure becomes a ScrapeResult
  with a `reason` from REASONS, so the loop always goes on.
- The size cap holds for the *decompressed* body as well as the bytes on the wire, while it
  is read (`inflate.CappedBody`; the session runs with `auto_decompress=False`), so a gzip
  bomb costs at most `max_bytes` of memory. Expected failures are returned, not raised:
  no refused buffer lives on in an exception's traceback.
- Only http and https targets exist: `parse_target` rejects anything else. Userinfo in a
  URL becomes the target's basic-auth credentials and never stays in `Target.url`, which is
  therefore safe to show; every other URL shown goes through `credentials.redact_url`.
- TLS certificates are verified (system CAs, or `--ca-file`); redirects follow
  `redirects.py`'s policy.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass

import aiohttp

from exporter.credentials import CredentialError, Credentials, redact_url, split_userinfo
from exporter.defaults import DEFAULT_MAX_BYTES
from exporter.inflate import BodyError, CappedBody
from exporter.redirects import MAX_REDIRECTS, REDIRECT_STATUSES, RedirectPolicy, origin, refusal, resolve

# Reasons that mark a target down (nothing usable was fetched).
DOWN_REASONS: tuple[str, ...] = (
    "connection_refused",
    "dns",
    "timeout",
    "connection",
    "tls",
    "credentials",
    "http_status",
    "redirect",
    "not_metrics",
    "too_large",
    "decode",
    "empty",
    "sample_limit",
    "instance_limit",
    "internal",
)
# Reasons counted while the target stays up (the rest of the exposition was used).
PARTIAL_REASONS: tuple[str, ...] = (
    "malformed_lines",
    "duplicate_series",
    "non_finite",
    "impossible_values",
    "unknown_dialect",
)
# Reasons that mean the target is over one of its limits (TargetState.over_limit).
LIMIT_REASONS: tuple[str, ...] = ("too_large", "sample_limit", "instance_limit")
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
    """`url` never carries userinfo (see the module doc); `credentials` None: no auth."""

    name: str
    url: str
    credentials: Credentials | None = None


def parse_target(spec: str) -> Target:
    """`[NAME=]URL` -> Target. A URL without a path gets `/metrics`; `user:password@` in
    it becomes basic-auth credentials.

    Raises TargetError for any scheme other than http/https and for URLs without a host;
    the message never shows a password.
    """
    name, url = None, spec.strip()
    head, sep, tail = url.partition("=")
    if sep and "://" not in head and "/" not in head:
        name, url = head.strip(), tail.strip()
    shown = redact_url(spec)
    if "://" not in url:
        raise TargetError(
            f"target {shown!r}: only http and https targets are accepted; give a full URL "
            f"such as http://{redact_url(url) or 'HOST:PORT'}"
        )
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise TargetError(
            f"target {shown!r}: only http and https targets are accepted (got {parts.scheme}://)"
        )
    try:
        host, _ = parts.hostname, parts.port  # .port raises on a bad port
    except ValueError as e:
        raise TargetError(f"target {shown!r}: {e}") from None
    if not host:
        raise TargetError(f"target {shown!r}: the URL has no host")
    if parts.path in ("", "/"):
        url = urllib.parse.urlunsplit(parts._replace(path="/metrics"))
    if name is None:  # host:port, never the user:password@ part of a URL
        name = f"{host}:{parts.port}" if parts.port else host
    if not name or any(c.isspace() for c in name):
        raise TargetError(f"target {shown!r}: the name must be non-empty and without spaces")
    url, credentials = split_userinfo(url)
    return Target(name, url, credentials)


@dataclass(slots=True)
class ScrapeResult:
    """Outcome of one fetch. `text` is set iff `reason` is None: the exposition, as the raw
    body (`scrape` leaves decoding, with `charset`, to `analysis`, off the event loop) or as
    text."""

    text: str | bytes | None
    reason: str | None
    detail: str
    duration: float
    status: int | None = None
    nbytes: int = 0
    charset: str = "utf-8"


@dataclass(frozen=True, slots=True)
class _Failure:
    reason: str
    detail: str
    status: int | None = None


_FIRST_NON_SPACE = re.compile(rb"\S")


def _content_failure(raw: bytes, content_type: str) -> _Failure | None:
    first = _FIRST_NON_SPACE.search(raw)
    head = raw[first.start() : first.start() + 1] if first else b""
    ctype = content_type.split(";")[0].strip().lower()
    if ctype == "text/html" or head == b"<":
        return _Failure("not_metrics", "HTML instead of metrics (wrong path, or a login/proxy page?)", 200)
    if ctype == "application/json" or head in (b"{", b"["):
        return _Failure(
            "not_metrics",
            "JSON instead of metrics (trtllm-serve serves Prometheus text at "
            "/prometheus/metrics; its /metrics is JSON)",
            200,
        )
    if first is None:
        return _Failure("empty", "empty body", 200)
    return None


async def _read(resp: aiohttp.ClientResponse, max_bytes: int) -> tuple[bytes, int] | _Failure:
    if resp.content_length is not None and resp.content_length > max_bytes:
        return _Failure("too_large", f"Content-Length {resp.content_length} exceeds {max_bytes} bytes", 200)
    body = CappedBody(resp.headers.get("Content-Encoding", ""), max_bytes)
    async for chunk in resp.content.iter_chunked(1 << 16):
        error = body.feed(chunk)
        while error is None and body.pending:
            await asyncio.sleep(0)  # let /healthz in between steps of a large inflate
            error = body.step()
        if error is not None:
            return _Failure(error.reason, error.detail, 200)
    raw = body.finish()
    if isinstance(raw, BodyError):
        return _Failure(raw.reason, raw.detail, 200)
    failure = _content_failure(raw, resp.headers.get("Content-Type", ""))
    return failure or (raw, body.wire_bytes)


async def _fetch(
    session: aiohttp.ClientSession, target: Target, max_bytes: int, redirects: RedirectPolicy
) -> tuple[bytes, str, int] | _Failure:
    """(body, charset, bytes on the wire), or why not."""
    headers = dict(HEADERS)
    if target.credentials is not None:
        try:
            headers["Authorization"] = target.credentials.header()
        except CredentialError as e:
            return _Failure("credentials", str(e))
    url = target.url
    for _ in range(MAX_REDIRECTS + 1):
        async with session.get(url, headers=headers, allow_redirects=False) as resp:
            if resp.status in REDIRECT_STATUSES and "Location" in resp.headers:
                next_url = resolve(url, resp.headers["Location"])
                why = refusal(redirects, target.url, next_url)
                if why is not None:
                    shown = redact_url(resp.headers["Location"])
                    return _Failure("redirect", f"HTTP {resp.status} to {shown}: {why}", resp.status)
                if origin(next_url) != origin(target.url):
                    headers.pop("Authorization", None)  # credentials never leave the target's origin
                url = next_url
                continue
            if resp.status != 200:
                return _Failure("http_status", f"HTTP {resp.status} {resp.reason or ''}".strip(), resp.status)
            got = await _read(resp, max_bytes)
            return got if isinstance(got, _Failure) else (got[0], resp.charset or "utf-8", got[1])
    return _Failure("redirect", f"more than {MAX_REDIRECTS} redirects")


def classify(exc: BaseException) -> tuple[str, str]:
    """Map a client exception to (reason, detail)."""
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return "timeout", "timed out (connect, headers or a slow body)"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError | ssl.SSLError):
        return "tls", f"TLS: {exc}"
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
    session: aiohttp.ClientSession,
    target: Target,
    timeout: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    redirects: RedirectPolicy = "same-origin",
) -> ScrapeResult:
    """Fetch `target` once within `timeout` seconds (everything included, redirects too)."""
    start = time.perf_counter()
    try:
        got = await asyncio.wait_for(_fetch(session, target, max_bytes, redirects), timeout)
    except asyncio.CancelledError:
        raise
    except BaseException as e:  # noqa: BLE001 - the loop must survive anything a target does
        if not isinstance(e, Exception):
            raise
        reason, detail = classify(e)
        return ScrapeResult(None, reason, detail, time.perf_counter() - start)
    if isinstance(got, _Failure):
        return ScrapeResult(None, got.reason, got.detail, time.perf_counter() - start, got.status)
    body, charset, nbytes = got
    return ScrapeResult(body, None, "", time.perf_counter() - start, 200, nbytes, charset)


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """Certificate-verifying TLS: the system's CAs, or only those in `ca_file` (PEM)."""
    return ssl.create_default_context(cafile=ca_file)


def make_session(timeout: float, tls: ssl.SSLContext | None = None) -> aiohttp.ClientSession:
    """Client session for scraping: no automatic decompression (see module docstring),
    certificates verified (`tls`, default: the system's CAs)."""
    return aiohttp.ClientSession(
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=timeout),
        # limit=0: one slow target must not queue others
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=10, ssl=tls or tls_context(None)),
        trust_env=False,
    )
