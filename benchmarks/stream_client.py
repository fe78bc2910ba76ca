"""What the server benchmarks share: a server child process, and a streaming client that
keeps the arrival time of every token.

Token counting: both kvscope and llama.cpp's llama-server stream one token per SSE chunk of a
choice (its text may be empty while a UTF-8 character is incomplete), so a chunk with a
non-empty `choices` list is one token, except llama-server's last chunk of a completion, which
carries the finish_reason and the usage but no token. vLLM may merge tokens into one chunk:
asked with `return_token_ids`, a chunk's `token_ids` says how many it carries.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]


class Child:
    """A `kvscope engine serve`-style child that prints `... listening on http://HOST:PORT`."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT, env=env
        )
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"server did not start: {line!r}")
        self.url = line.strip().rsplit(" ", 1)[1]

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)


@dataclass(slots=True)
class StreamResult:
    started: float  # perf_counter when the request was sent
    token_times: list[float] = field(default_factory=list)  # perf_counter at each token's chunk
    completion_tokens: int = 0  # from the server's usage, when it sent one
    kvscope: dict | None = None  # the server's timing object, when it sent one

    @property
    def ttft(self) -> float:
        return self.token_times[0] - self.started

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times, self.token_times[1:])]


async def stream(session: aiohttp.ClientSession, url: str, body: dict) -> StreamResult:
    result = StreamResult(time.perf_counter())
    async with session.post(url + "/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.content:
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            now = time.perf_counter()
            chunk = json.loads(line[6:])
            if chunk.get("choices") and not chunk.get("usage"):
                # vLLM puts several tokens in one chunk when its API server falls behind the
                # engine; asked for `return_token_ids`, it lists them in the chunk
                ids = chunk["choices"][0].get("token_ids")
                result.token_times.extend([now] * (1 if ids is None else len(ids)))
            if chunk.get("usage"):
                result.completion_tokens = chunk["usage"]["completion_tokens"]
            if "kvscope" in chunk:
                result.kvscope = chunk["kvscope"]
    return result


async def _all(url: str, bodies: list[dict]) -> tuple[list[StreamResult], float]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=1800)
    ) as session:
        start = time.perf_counter()
        results = await asyncio.gather(*(stream(session, url, b) for b in bodies))
        return list(results), time.perf_counter() - start


def run_streams(url: str, bodies: list[dict]) -> tuple[list[StreamResult], float]:
    """All bodies at once; (one result per body, wall seconds)."""
    return asyncio.run(_all(url, bodies))


def decode_rate(results: list[StreamResult]) -> float:
    """Aggregate decode tokens/s while every stream is decoding: tokens that arrived between
    the last stream's first token and the first stream's last token, over that window. So no
    prefill, no ramp-up and no tail with fewer streams are counted."""
    start = max(r.token_times[0] for r in results)
    end = min(r.token_times[-1] for r in results)
    if end <= start:
        raise ValueError("the streams never decoded all at once; give them more tokens")
    tokens = sum(sum(1 for t in r.token_times if start < t <= end) for r in results)
    return tokens / (end - start)


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] if values else float("nan")
