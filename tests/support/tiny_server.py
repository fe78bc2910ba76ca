"""The reference server on tiny-random weights, on a background thread: for server tests that
need a real engine behind the HTTP API but not a real model's text."""

from __future__ import annotations

import http.client
import time

from reference_engine.config import EngineConfig
from reference_engine.engine_factory import build_engine
from reference_engine.serve_options import HttpLimits
from reference_engine.server.app import create_app
from reference_engine.server.background import BackgroundServer
from reference_engine.server.state import ServerConfig

MODEL = "tiny"


def start(limits: HttpLimits | None = None, **config) -> BackgroundServer:
    """A started server serving tiny-random as `MODEL`; `config` goes to EngineConfig."""
    built = build_engine(EngineConfig(model="tiny-random", **config))
    info = {
        "block_size": "16",
        "num_gpu_blocks": str(built.num_blocks),
        "cache_dtype": "auto",
        "enable_prefix_caching": "True",
        "allocator": "paged",
    }
    app = create_app(built.engine, built.tokenizer, ServerConfig(MODEL, "tiny-random"), info)
    return BackgroundServer(app, limits=limits).start()


def post(server: BackgroundServer, path: str, body: bytes, timeout: float = 120) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def wait_idle(server: BackgroundServer, timeout: float = 30.0) -> None:
    engine = server.state.engine_loop.engine
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not engine.has_unfinished() and server.state.engine_loop.num_in_flight == 0:
            return
        time.sleep(0.02)
    raise AssertionError("the engine did not go idle")


def assert_no_leaked_blocks(server: BackgroundServer) -> None:
    """Idle, and every KV block but the null block is free."""
    wait_idle(server)
    pool = server.state.engine_loop.engine.kv.pool
    assert pool.num_free_blocks == pool.num_blocks - 1, (pool.num_free_blocks, pool.num_blocks)
