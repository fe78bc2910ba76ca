"""The engine core's busy loop, the same in the core process and in the in-process thread.

Each iteration: apply the commands that arrived (waiting for one when there is no work),
run one step if there is work, then send one `CoreOutputs` with whatever changed. Commands
are applied only between steps, so an abort frees its blocks before the next step begins:
within one step of its arrival.

The transport is what differs between the two modes: `receive(block)` returns the commands
waiting (blocking for at least one when asked; None when the other side is gone) and
`send(outputs)` hands one iteration's outputs over.

Failure: a step that raises leaves the engine in an unknown state. The loop reports it once
(`CoreOutputs.failure`), then refuses every new request until told to shut down, so the
server can answer 500 and a supervisor restart it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from reference_engine.core.engine_core import EngineCore
from reference_engine.core.messages import (
    AbortRequests,
    AddRequest,
    Command,
    CoreOutputs,
    Rejection,
    SeqOutput,
    Shutdown,
    StopSequences,
)

log = logging.getLogger("kvscope.core")


class CoreTransport(Protocol):
    def receive(self, block: bool) -> list[Command] | None: ...

    def send(self, outputs: CoreOutputs) -> None: ...


class CoreLoop:
    """`on_step_start(t)` (the simulator's pacing hook) is called before each step with the time
    the step's work began: right after the previous step when the core is continuously busy
    (so output handling and scheduling count inside the step), or the wake-up time after idle.
    Times are read off the engine's clock, as the engine's own stamps are.
    """

    def __init__(
        self,
        core: EngineCore,
        transport: CoreTransport,
        on_step_start: Callable[[float], None] | None = None,
    ):
        self.core = core
        self.transport = transport
        self.on_step_start = on_step_start
        self.failed = False
        self._next_step_start: float | None = None
        self._outputs: list[SeqOutput] = []
        self._rejected: list[Rejection] = []
        self._step_tokens: list[int] = []
        self._changed = False  # commands applied or a step run since the last send

    def run(self) -> None:
        """Until `Shutdown` (or the transport closes); what is still running is then aborted
        and reported, and the engine's KV event publisher closed."""
        try:
            self._run()
        finally:
            self.core.engine.close()

    def _run(self) -> None:
        try:
            while self._apply(self.transport.receive(block=not self.core.has_work())):
                if self.core.has_work():
                    self._step()
                else:
                    self._next_step_start = None
                self._flush()
        except Exception as exc:  # noqa: BLE001 - the engine is unusable after any step failure
            log.exception("engine step failed; refusing further requests")
            self.failed = True
            self._outputs.clear()
            self._flush(failure=f"{type(exc).__name__}: {exc}")
            self._refuse_until_shutdown()
            return
        self._outputs += self.core.abort(list(self.core.engine.groups))
        self._flush()

    def _apply(self, commands: list[Command] | None) -> bool:
        """Apply commands in arrival order. False when it is time to stop."""
        if commands is None:
            return False
        for command in commands:
            match command:
                case AddRequest():
                    rejection = self.core.add(command)
                    if rejection is not None:
                        self._rejected.append(rejection)
                case AbortRequests(request_ids):
                    self._outputs += self.core.abort(request_ids)
                case StopSequences(choices):
                    self.core.stop_sequences(choices)
                case Shutdown():
                    return False
        self._changed = self._changed or bool(commands)
        return True

    def _step(self) -> None:
        start = self._next_step_start or self.core.engine.clock.now()
        if self.on_step_start is not None:
            self.on_step_start(start)
        steps_before = self.core.engine.stats.steps
        self._outputs += self.core.step()
        self._next_step_start = self.core.engine.clock.now()
        stats = self.core.engine.stats
        if stats.steps == steps_before:
            time.sleep(0.001)  # nothing could be scheduled this round; do not spin
        else:
            self._step_tokens.append(stats.last_step_tokens)
            self._changed = True

    def _flush(self, failure: str | None = None) -> None:
        if not (self._changed or self._outputs or self._rejected or failure):
            return
        outputs = CoreOutputs(
            timestamp=self._next_step_start or self.core.engine.clock.now(),
            outputs=self._outputs,
            stats=self.core.stats(self._step_tokens),
            rejected=self._rejected or None,
            failure=failure,
        )
        self._outputs, self._rejected, self._step_tokens, self._changed = [], [], [], False
        self.transport.send(outputs)

    def _refuse_until_shutdown(self) -> None:
        while True:
            commands = self.transport.receive(block=True)
            if commands is None:
                return
            for command in commands:
                if isinstance(command, Shutdown):
                    return
                if isinstance(command, AddRequest):
                    self._rejected.append(Rejection(command.request_id, "the engine failed", internal=True))
            if self._rejected:
                self._flush()
