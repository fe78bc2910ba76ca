"""Fetch a dialect's probe paths (`dialects.probe`) next to its `/metrics`: JSON, size-capped.

Invariants: `fetch_replies` never raises (except CancelledError); every path gets a
ProbeReply, with `error` set to a one-line reason when it has no usable body. Paths resolve
against the folder of the target's metrics URL, so a server behind a path prefix
(`http://gw/llama/metrics`) is probed at `http://gw/llama/slots`.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse

import aiohttp

from exporter.dialects.probe import ProbeReply
from exporter.scrape import HEADERS, classify

JSON_HEADERS = {**HEADERS, "Accept": "application/json", "Accept-Encoding": "identity"}


def probe_url(metrics_url: str, path: str) -> str:
    parts = urllib.parse.urlsplit(metrics_url)
    folder = parts.path.rsplit("/", 1)[0]
    return urllib.parse.urlunsplit(parts._replace(path=folder + path, query="", fragment=""))


async def _fetch(session: aiohttp.ClientSession, url: str, path: str, max_bytes: int) -> ProbeReply:
    async with session.get(url, headers=JSON_HEADERS, allow_redirects=False) as resp:
        if resp.status != 200:
            return ProbeReply(path, error=f"HTTP {resp.status} {resp.reason or ''}".strip())
        raw = await resp.content.read(max_bytes + 1)
        if len(raw) > max_bytes:
            return ProbeReply(path, error=f"body exceeds {max_bytes} bytes")
        try:
            return ProbeReply(path, json.loads(raw.decode("utf-8", errors="replace")))
        except ValueError as exc:
            return ProbeReply(path, error=f"not JSON: {exc}")


async def fetch_replies(
    session: aiohttp.ClientSession, metrics_url: str, paths: tuple[str, ...], timeout: float, max_bytes: int
) -> dict[str, ProbeReply]:
    """Every path fetched concurrently, all within `timeout` seconds."""

    async def one(path: str) -> ProbeReply:
        try:
            return await asyncio.wait_for(
                _fetch(session, probe_url(metrics_url, path), path, max_bytes), timeout
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed probe is a note, never a failed scrape
            return ProbeReply(path, error=classify(exc)[1])

    replies = await asyncio.gather(*(one(p) for p in paths))
    return {r.path: r for r in replies}
