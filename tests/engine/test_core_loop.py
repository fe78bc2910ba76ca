"""The engine core's loop, driven by a scripted transport (the same loop runs in the core
process and in the in-process thread; only the transport differs).

- An abort that arrives while its request runs frees the request's blocks before another
  step runs, and the same iteration reports the end of every choice.
- A step that raises is reported once, and every later request is refused until shutdown.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from reference_engine.core.core_loop import CoreLoop
from reference_engine.core.engine_core import EngineCore
from reference_engine.core.messages import AbortRequests, AddRequest, Command, CoreOutputs, Shutdown
from reference_engine.sampling_params import SamplingParams
from tests.engine.fakes import make_engine


@dataclass
class Sent:
    outputs: CoreOutputs
    steps: int  # engine steps run when the outputs were sent
    free_blocks: int


@dataclass
class ScriptedTransport:
    """Hands the loop one list of commands per iteration; records every send together with
    the engine's state at that moment. An exhausted script reads as the server gone."""

    core: EngineCore
    script: deque[list[Command]]
    sent: list[Sent] = field(default_factory=list)

    def receive(self, block: bool) -> list[Command] | None:
        return self.script.popleft() if self.script else None

    def send(self, outputs: CoreOutputs) -> None:
        engine = self.core.engine
        self.sent.append(Sent(outputs, engine.stats.steps, engine.kv.pool.num_free_blocks))


def _add(request_id: str, n: int = 1) -> AddRequest:
    return AddRequest(
        request_id, list(range(1, 30)), SamplingParams(max_tokens=200, n=n, ignore_eos=True), 0.0
    )


def test_an_abort_frees_its_blocks_before_the_next_step() -> None:
    core = EngineCore(make_engine(detokenize=False))
    idle = core.engine.kv.pool.num_free_blocks  # all but the pool's null block
    transport = ScriptedTransport(
        core, deque([[_add("r", n=2)], [], [], [AbortRequests(["r"])], [], [Shutdown()]])
    )
    CoreLoop(core, transport).run()
    running, aborted = transport.sent[2], transport.sent[3]
    assert running.free_blocks < idle, "the request held blocks while it ran"
    assert aborted.steps == running.steps, "no step ran between the abort's arrival and its effect"
    assert aborted.free_blocks == idle
    ends = [(o.request_id, o.index, o.finish_reason) for o in aborted.outputs.outputs]
    assert sorted(ends) == [("r", 0, "abort"), ("r", 1, "abort")]
    assert aborted.outputs.stats.num_free_blocks == idle and aborted.outputs.stats.num_running == 0


def test_a_failed_step_is_reported_once_and_later_requests_are_refused() -> None:
    core = EngineCore(make_engine(detokenize=False))

    def broken_step():
        raise RuntimeError("kernel fault")

    core.step = broken_step  # type: ignore[method-assign]
    transport = ScriptedTransport(
        core, deque([[_add("a")], [_add("b"), _add("c")], [Shutdown()], [_add("d")]])
    )
    CoreLoop(core, transport).run()
    failures = [s.outputs.failure for s in transport.sent if s.outputs.failure]
    assert failures == ["RuntimeError: kernel fault"]
    refused = [r.request_id for s in transport.sent for r in s.outputs.rejected or ()]
    assert refused == ["b", "c"], "refused until shutdown; nothing read after it"
    assert all(r.internal for s in transport.sent for r in s.outputs.rejected or ())
    assert list(transport.script) == [[_add("d")]]
