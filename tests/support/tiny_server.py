"""The reference server on tiny-random weights, on a background thread: for server tests that
need a real engine behind the HTTP API but not a real model's text. The engine core runs in a
process of its own (as `kvscope engine serve` runs it): what the server knows of it arrives as
messages (`state.engine.stats` is the core's latest statistics record)."""

from __future__ import annotations

import http.client

from reference_engine.config import EngineConfig
from reference_engine.core.launch import CoreLaunch
from reference_engine.serve_options import HttpLimits
from reference_engine.server.background import BackgroundServer, serve_in_background
from tests.support.wait import wait_until

MODEL = "tiny"


def start(limits: HttpLimits | None = None, **config) -> BackgroundServer:
    """A started server serving tiny-random as `MODEL`; `config` goes to EngineConfig."""
    launch = CoreLaunch(EngineConfig(model="tiny-random", **config))
    return serve_in_background(launch, MODEL, limits=limits).start()


def post(server: BackgroundServer, path: str, body: bytes, timeout: float = 120) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def wait_idle(server: BackgroundServer, timeout: float = 30.0) -> None:
    engine = server.state.engine

    def busy() -> dict[str, int]:
        stats = engine.stats
        return {"running": stats.num_running, "waiting": stats.num_waiting, "in_flight": engine.num_in_flight}

    wait_until(busy, "the engine idle", timeout, 0.02, ok=lambda counts: not any(counts.values()))


def all_blocks_free(server: BackgroundServer) -> bool:
    return server.state.engine.stats.num_free_blocks == server.state.ready.num_blocks - 1


def assert_no_leaked_blocks(server: BackgroundServer) -> None:
    """Idle, and every KV block but the null block is free."""
    wait_idle(server)
    stats = server.state.engine.stats
    assert all_blocks_free(server), (stats.num_free_blocks, server.state.ready.num_blocks)
