"""Drive an engine with a request trace and measure it while it is saturated.

One loop for both platforms, so the simulator and the real CPU model report the same three
quantities computed the same way:

- token-state share: the time-weighted share of allocated KV slots that hold a computed
  token, by `reference_engine.sim.replay.token_state_share` (imported, so there is one
  definition; `replay_trace` uses the same function);
- requests running: the most at once in the window, and the time-weighted mean (the
  paper's Fig. 13 "average number of batched requests");
- output throughput: tokens emitted per second.

Why a window instead of the whole trace: a finite trace ends with a drain in which the last
long requests run almost alone, and starts with a ramp in which every request is young. Both
distort the averages (a 1024-token answer outlives thousands of short ones), and the drain
can take most of a short run. The window opens after `warmup_steps` (set it to at least the
longest request's decode steps, so the first admission wave has turned over) and closes
after `measure_steps` or when the waiting queue runs dry, whichever comes first; the drain
is never simulated. Steps in the window with an empty waiting queue are counted: the
measurement is "at saturation" only if there are none.

Arrivals follow the trace's times, but a request is handed to the engine only while fewer
than `max_backlog` wait: a deeper backlog changes nothing in a saturated engine and only
costs time, because the engine visits every queued request each step.
"""

from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from reference_engine.engine import LLMEngine
from reference_engine.sampling_params import SamplingParams
from reference_engine.sim.replay import TraceRequest, VirtualClock, token_state_share


class Clock(Protocol):
    def now(self) -> float: ...
    def advance(self, seconds: float) -> None: ...


class WallClock:
    """Real time, for the real model; `advance` waits."""

    def now(self) -> float:
        return time.perf_counter()

    def advance(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


__all__ = ["Clock", "SaturatedRun", "VirtualClock", "WallClock", "run_saturated"]


@dataclass(slots=True)
class SaturatedRun:
    """What one run measured. Window quantities are time-weighted over the window's steps."""

    steps: int = 0
    window_steps: int = 0
    window_s: float = 0.0
    unsaturated_steps: int = 0  # window steps that ended with nobody waiting
    token_state_share: float = 0.0
    max_running: int = 0
    mean_running: float = 0.0
    mean_context: float = 0.0  # computed tokens per running request, time-weighted
    window_output_tokens: int = 0
    num_preemptions: int = 0
    admitted: int = 0
    finished: int = 0

    @property
    def output_tokens_per_s(self) -> float:
        return self.window_output_tokens / self.window_s if self.window_s else 0.0

    @property
    def mean_step_s(self) -> float:
        return self.window_s / self.window_steps if self.window_steps else 0.0

    @property
    def saturated(self) -> bool:
        return self.window_steps > 0 and self.unsaturated_steps == 0


def run_saturated(
    engine: LLMEngine,
    trace: list[TraceRequest],
    clock: Clock,
    *,
    warmup_steps: int,
    measure_steps: int,
    token_range: tuple[int, int] = (1000, 60_000),
    share_every: int = 1,
    max_backlog: int = 256,
    temperature: float = 1.0,
    seed: int = 0,
) -> SaturatedRun:
    """Run `trace` until the window closes. Prompts are random token ids in `token_range`
    (no two prompts share a block, so the prefix cache never helps). `share_every` samples the
    token-state share on every k-th window step only (weighted by that step's duration): the
    share walks every allocated block and would otherwise dominate a long simulation."""
    rng = random.Random(seed)
    pending = deque(sorted(trace, key=lambda r: r.arrival_s))
    run = SaturatedRun()
    share_weight = share_time = running_time = context_time = 0.0
    t0 = clock.now()
    scheduler = engine.scheduler
    while run.window_steps < measure_steps:
        now = clock.now() - t0
        while pending and pending[0].arrival_s <= now and len(scheduler.waiting) < max_backlog:
            req = pending.popleft()
            params = SamplingParams(
                max_tokens=req.output_tokens,
                n=req.n,
                ignore_eos=True,
                temperature=temperature,
                seed=seed + run.admitted,
            )
            engine.add_request([rng.randrange(*token_range) for _ in range(req.prompt_tokens)], params)
            run.admitted += 1
        if not engine.has_unfinished():
            if not pending:
                break
            clock.advance(pending[0].arrival_s - now)
            continue
        in_window = run.steps >= warmup_steps
        if in_window and not pending and not scheduler.waiting:
            break  # the trace ran dry: what follows is the drain
        before = clock.now()
        outputs = engine.step()
        dt = clock.now() - before
        run.steps += 1
        running = len(scheduler.running)
        run.finished += sum(1 for o in outputs if o.finished)
        if not in_window:
            continue
        # In the window only: a paged engine admits a burst of fresh (short) requests at the
        # start and preempts some later; that transient is not its steady concurrency.
        run.max_running = max(run.max_running, running)
        run.window_steps += 1
        run.window_s += dt
        running_time += running * dt
        run.window_output_tokens += sum(len(o.new_token_ids) for o in outputs)
        run.unsaturated_steps += not scheduler.waiting
        if run.window_steps % share_every == 0 and running:
            share_time += token_state_share(scheduler.running, engine.kv) * dt
            context_time += sum(r.num_computed_tokens for r in scheduler.running) / running * dt
            share_weight += dt
    run.token_state_share = share_time / share_weight if share_weight else 0.0
    run.mean_running = running_time / run.window_s if run.window_s else 0.0
    run.mean_context = context_time / share_weight if share_weight else 0.0
    run.num_preemptions = scheduler.num_preemptions
    return run
