"""One lone request of the ladder, and the pool read while it is alive.

The prompt is token ids drawn at random (unique: no earlier prompt shares even its first
block, so the prefix cache gives nothing); `ignore_eos` makes the output exactly
`max_tokens` long; the server's own `usage` gives the counts. While the response streams,
the pool is read again and again (`PoolReader`), so the request's blocks are seen climbing
block by block to its peak, which lasts at least a block of decode steps (`ladder`).

Reads are paced to a quarter of the time until the last DENSE_TAIL output tokens, then back
to back: the peak's last block may be held for as few as 16 decode steps (16-token blocks),
and a read missed there reads the request one block short. A pause is never longer than
MAX_READ_PAUSE_S: paced to a read that one busy moment made slow, it would outlast the request.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field

import aiohttp

from harness.probe.ladder import Rung
from harness.probe.observation import PoolReading, RequestObservation
from harness.probe.reader import PoolReader, ReadError

TOKEN_IDS = (1000, 20000)  # ordinary tokens in every current vocabulary, away from special ids
REQUEST_TIMEOUT_S = 600.0
# Reads are paced so they take at most a quarter of the time (each is a /metrics render on the
# server): back to back they slowed a 2-core CPU engine's decode several times over. A block
# of decode steps still gets several reads.
READ_PAUSE_FACTOR = 3.0
MIN_READ_PAUSE_S = 0.002
# On a busy 2-core machine one /metrics read of vLLM took seconds; three times that let a
# 193-token request (vLLM on CPU: a few seconds) finish unread: 1 reading, usage never rose.
MAX_READ_PAUSE_S = 0.25
DENSE_TAIL = 48  # output tokens before the end from which reads go back to back
# A server may count the previous request as running (and its blocks as held) a moment after
# its stream ended: the next one waits, this long at most, for none to be running.
IDLE_WAIT_S = 5.0
IDLE_POLL_S = 0.05


def unique_prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(*TOKEN_IDS) for _ in range(n)]


@dataclass(slots=True)
class _Stream:
    done: bool = False
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    chunks: int = 0
    error: str | None = None
    readings: list[PoolReading] = field(default_factory=list)


async def _stream(session: aiohttp.ClientSession, url: str, body: dict, headers: dict, out: _Stream) -> None:
    try:
        async with session.post(
            url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(REQUEST_TIMEOUT_S)
        ) as resp:
            if resp.status != 200:
                text = (await resp.text(errors="replace"))[:300]
                out.error = f"HTTP {resp.status}: {text}"
                return
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data:") or line == b"data: [DONE]":
                    continue
                chunk = json.loads(line[5:])
                out.chunks += bool(chunk.get("choices"))
                usage = chunk.get("usage")
                if isinstance(usage, dict):
                    out.prompt_tokens = usage.get("prompt_tokens")
                    out.output_tokens = usage.get("completion_tokens")
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
    finally:
        out.done = True


async def _poll(reader: PoolReader, out: _Stream, output_tokens: int) -> None:
    loop = asyncio.get_running_loop()
    dense_from = output_tokens - DENSE_TAIL
    while not out.done:
        start = loop.time()
        try:
            out.readings.append(await reader.read())
        except ReadError:
            pass  # one missed read; the next may answer
        paced = out.chunks < dense_from
        pause = min(READ_PAUSE_FACTOR * (loop.time() - start), MAX_READ_PAUSE_S)
        await asyncio.sleep(pause if paced else MIN_READ_PAUSE_S)


async def idle_reading(reader: PoolReader) -> PoolReading:
    """A reading with no request running (or the last one read in IDLE_WAIT_S)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + IDLE_WAIT_S
    reading = await reader.read()
    while reading.running and loop.time() < deadline:
        await asyncio.sleep(IDLE_POLL_S)
        reading = await reader.read()
    return reading


def _delta(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else after - before


async def observe(
    session: aiohttp.ClientSession,
    base_url: str,
    model: str,
    rung: Rung,
    reader: PoolReader,
    rng: random.Random,
    headers: dict[str, str] | None = None,
) -> RequestObservation:
    """Send one rung alone and read the pool while it lives (ReadError: no idle reading)."""
    before = await idle_reading(reader)
    body = {
        "model": model,
        "prompt": unique_prompt(rng, rung.prompt_tokens),
        "max_tokens": rung.output_tokens,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    out = _Stream()
    await asyncio.gather(
        _stream(session, base_url + "/v1/completions", body, headers or {}, out),
        _poll(reader, out, rung.output_tokens),
    )
    after = await reader.read()
    usages = [r.usage for r in out.readings if r.usage is not None]
    peak = max(usages, default=None)
    running = [r.running for r in out.readings if r.running is not None]
    return RequestObservation(
        requested_prompt_tokens=rung.prompt_tokens,
        requested_output_tokens=rung.output_tokens,
        prompt_tokens=out.prompt_tokens or rung.prompt_tokens,
        output_tokens=out.output_tokens or out.chunks or rung.output_tokens,
        idle_before=before.usage,
        idle_after=after.usage,
        peak_usage=_delta(peak, before.usage),
        levels=tuple(sorted(set(usages))),
        readings=len(out.readings),
        preemptions=_delta(after.preemptions, before.preemptions),
        max_running=max(running, default=None),
        error=out.error,
    )
