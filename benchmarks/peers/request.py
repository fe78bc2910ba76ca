"""The one request every peer client sends, and the per-request line it writes, so the
clients differ only in how they read the stream.

A completion of PROMPT_WORDS words (one token each for SmolLM2's tokenizer, which the
simulator uses) asking for `max_tokens` tokens with ignore_eos, streamed with usage. The
line: TTFT, every inter-chunk gap, output tokens and the server's own TTFT (the reference
engine's `kvscope` timing object in the last chunk).
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field

WORDS = (
    "the of and to in is was for that with on as by at from his her they this had not are but one "
    "all were when there can more time who will what about said some would other into has"
).split()


def body(model: str, prompt_words: int, max_tokens: int, rng: random.Random) -> bytes:
    prompt = " ".join(rng.choice(WORDS) for _ in range(prompt_words))
    return json.dumps(
        {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": 0.0,
        }
    ).encode()


def record(start: float, stamps: list[float], tokens: int | None, server_ttft: float | None, ok: bool) -> str:
    """One JSON line: ttft_s, itl_s (gaps between chunks), output tokens, server TTFT."""
    return json.dumps(
        {
            "ok": ok and bool(stamps),
            "ttft_s": stamps[0] - start if stamps else None,
            "itl_s": [b - a for a, b in zip(stamps, stamps[1:])],
            "output_tokens": tokens if tokens is not None else len(stamps),
            "server_ttft_s": server_ttft,
        }
    )


def parse_data(line: bytes) -> dict | None:
    """The JSON of an SSE `data:` line (None for anything else, including [DONE])."""
    if not line.startswith(b"data:"):
        return None
    payload = line[5:].strip()
    if payload == b"[DONE]":
        return None
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclass(slots=True)
class Reading:
    """One stream as it is read: a stamp per chunk carrying text, then the usage and the
    server's timing object from the last chunks."""

    start: float
    stamps: list[float] = field(default_factory=list)
    tokens: int | None = None
    server_ttft: float | None = None

    def line(self, line: bytes, now: float) -> None:
        chunk = parse_data(line)
        if chunk is None:
            return
        if any(isinstance(c.get("text"), str) for c in chunk.get("choices") or ()):
            self.stamps.append(now)
        if isinstance(chunk.get("usage"), dict):
            self.tokens = chunk["usage"].get("completion_tokens")
        if isinstance(chunk.get("kvscope"), dict):
            self.server_ttft = chunk["kvscope"].get("ttft_s")

    def record(self, ok: bool) -> str:
        return record(self.start, self.stamps, self.tokens, self.server_ttft, ok)


def client_args(description: str) -> argparse.Namespace:
    """The command line every own-design client takes (clients.py builds it: `own_client`)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--url", required=True)
    p.add_argument("--model", default="default")
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--duration", type=float, default=20.0)
    p.add_argument("--prompt-words", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--out", required=True)
    return p.parse_args()
