"""How the API server reaches an engine core (`CoreClient`), and the in-process client.

Two clients with one interface, as vLLM V1 has (`InprocClient`, `AsyncMPClient`):
- `ThreadCoreClient` runs the core loop on a thread of the server process: for tests that
  hand the server an engine they built (fakes, failing executors) and for `--engine-core
  thread` (one process to profile or debug);
- `ProcessCoreClient` (`process_client`) starts the core as its own process and talks
  ZeroMQ: the default of `kvscope engine serve`.

Both deliver every `CoreOutputs` to `on_outputs` on the event loop's thread, in order, and
call `on_exit(status)` there if the core ends while the server still needs it.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

from reference_engine.core.core_loop import CoreLoop
from reference_engine.core.engine_core import EngineCore
from reference_engine.core.messages import Command, CoreOutputs, CoreReady, Shutdown
from reference_engine.engine import LLMEngine

log = logging.getLogger("kvscope.server")

OnOutputs = Callable[[CoreOutputs], None]
OnExit = Callable[[int | None], None]


class CoreStartError(RuntimeError):
    """The core could not be built; the message is the core's own (meant for the user)."""


class CoreClient(Protocol):
    async def start(self, on_outputs: OnOutputs, on_exit: OnExit) -> CoreReady:
        """Start the core (if not yet started) and return once it is ready to take requests.
        Raises CoreStartError."""
        ...

    def send(self, command: Command) -> None:
        """Queue a command; never blocks."""
        ...

    def deliver_waiting(self) -> None:
        """Hand the outputs that have arrived and are not handed on yet to `on_outputs` now, in
        order, instead of when the event loop comes to them: the server calls it before work
        of its own, so that streams already running go first."""
        ...

    async def stop(self, timeout: float) -> int | None:
        """Shut the core down (aborting what it still runs) and release everything; the
        process's exit status, or None for a thread."""
        ...


class _QueueTransport:
    """Thread-side `CoreTransport`: commands from a SimpleQueue, outputs to the event loop
    through a deque that `deliver_waiting` drains (from a callback the core thread schedules,
    or earlier, from the server)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_outputs: OnOutputs):
        self.inbox: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self.outbox: deque[CoreOutputs] = deque()
        self.loop, self.on_outputs = loop, on_outputs

    def receive(self, block: bool) -> list[Command] | None:
        commands = []
        try:
            commands.append(self.inbox.get(block=block))
            while True:
                commands.append(self.inbox.get_nowait())
        except queue.Empty:
            return commands

    def send(self, outputs: CoreOutputs) -> None:
        self.outbox.append(outputs)
        try:
            self.loop.call_soon_threadsafe(self.deliver_waiting)
        except RuntimeError:
            pass  # the event loop is closed: nobody is listening any more

    def deliver_waiting(self) -> None:
        outbox = self.outbox
        while outbox:
            try:
                self.on_outputs(outbox.popleft())
            except Exception:  # one bad step's outputs must not stop the routing of later ones
                log.exception("handling the engine core's outputs failed")


class ThreadCoreClient:
    """The core loop on a daemon thread over `engine` (built with detokenize=False)."""

    def __init__(
        self,
        engine: LLMEngine,
        ready: CoreReady,
        on_step_start: Callable[[float], None] | None = None,
    ):
        self.core = EngineCore(engine)
        self.ready = ready
        self.on_step_start = on_step_start
        self._transport: _QueueTransport | None = None
        self._thread: threading.Thread | None = None

    async def start(self, on_outputs: OnOutputs, on_exit: OnExit) -> CoreReady:
        self._transport = _QueueTransport(asyncio.get_running_loop(), on_outputs)
        loop = CoreLoop(self.core, self._transport, self.on_step_start)
        self._thread = threading.Thread(target=loop.run, name="kvscope-engine-core", daemon=True)
        self._thread.start()
        return self.ready

    def send(self, command: Command) -> None:
        if self._transport is not None:
            self._transport.inbox.put(command)

    def deliver_waiting(self) -> None:
        if self._transport is not None:
            self._transport.deliver_waiting()

    async def stop(self, timeout: float) -> int | None:
        if self._thread is not None and self._thread.is_alive():
            self.send(Shutdown())
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, timeout)
        return None
