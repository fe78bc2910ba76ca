"""A tiny-random bundled engine whose KV pool is too small for its load (it preempts), and
the request that loads it: shared by the exporter integration and dashboards end-to-end tests."""

from __future__ import annotations

import json
import sys
import urllib.request

SYSTEM = "You are a careful assistant who answers questions about the weather in great detail. "


def engine_argv(port: int) -> list[str]:
    # 23 usable blocks of 16 tokens cannot hold 8 requests of ~150 tokens: preemption.
    return [
        sys.executable,
        "-m",
        "harness.cli",
        "engine",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        "tiny-random",
        "--num-blocks",
        "24",
        "--max-num-seqs",
        "8",
    ]


def complete(base: str, i: int) -> dict:
    body = json.dumps(
        {
            "model": "tiny-random",
            "prompt": SYSTEM + f"Question {i}?",
            "max_tokens": 48,
            "ignore_eos": True,
            "temperature": 0,
        }
    ).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:  # noqa: S310 - loopback
        return json.load(r)
