"""Run a server app on a background thread with its own event loop, for tests and benchmarks.

Why a thread and not the caller's loop: synchronous clients (the official `openai` client,
`urllib`) can then talk to the server from the calling thread, and the server's loop is
never blocked by the test. The port is chosen by the OS (bind to port 0), so parallel runs
never collide.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from aiohttp import web

from reference_engine.server.http_guard import GuardedAppRunner, HttpLimits
from reference_engine.server.log_limit import RateLimitedLog
from reference_engine.server.state import STATE, ServerConfig, ServerState

if TYPE_CHECKING:
    from reference_engine.core.launch import CoreLaunch

# The app's startup waits for the engine core, which may load a model first.
READY_TIMEOUT_S = 300.0


class BackgroundServer:
    """`with BackgroundServer(app) as server: ... server.url ...`; stops the engine on exit."""

    def __init__(
        self, app: web.Application, host: str = "127.0.0.1", port: int = 0, limits: HttpLimits | None = None
    ):
        self.app = app
        self.host = host
        self.port = port
        self.limits = limits or HttpLimits()
        self.loop = asyncio.new_event_loop()
        self._runner: GuardedAppRunner | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="kvscope-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def state(self) -> ServerState:
        return self.app[STATE]

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._start())
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self._runner.cleanup())
        self.loop.close()

    async def _start(self) -> None:
        log = RateLimitedLog(logging.getLogger("kvscope.server"))
        self._runner = GuardedAppRunner(
            self.app,
            self.limits,
            log,
            before_request=self.app[STATE].engine.route_waiting,
            handler_cancellation=True,
            access_log=None,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=self.limits.max_connections)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def start(self) -> BackgroundServer:
        self._thread.start()
        self._ready.wait(READY_TIMEOUT_S)
        if self._error is not None:
            raise RuntimeError(f"server failed to start: {self._error}") from self._error
        return self

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float = 60.0) -> Any:
        """Run a coroutine on the server's loop (e.g. `app.drain`) and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_background(
    launch: CoreLaunch,
    served_model_name: str,
    api_key: str | None = None,
    engine_core: str = "process",
    limits: HttpLimits | None = None,
) -> BackgroundServer:
    """A server for `launch` (not started: use `with` or `.start()`), its engine core in a
    process of its own (as `kvscope engine serve` runs it) or, with engine_core="thread", on a
    thread of this process."""
    from reference_engine.server.app import create_app
    from reference_engine.server.serve_cli import open_core

    client, tokenizer = open_core(launch, engine_core)
    return BackgroundServer(
        create_app(client, tokenizer, ServerConfig(served_model_name, api_key=api_key)), limits=limits
    )
