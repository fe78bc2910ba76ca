"""The simulator's executor: the forward pass replaced by the cost model's step time, waited
out on the engine's clock (slept on the host's, jumped on a replay's virtual clock), and tokens
drawn deterministically from a real tokenizer's vocabulary.

Everything else (scheduler, block pool, prefix cache, preemption, stop strings, detokenizing)
is the real engine, so KV occupancy, queueing and preemption behave as on the modelled GPU,
at the modelled speed, while the host only sleeps.

Token draws: token at position p of choice i is a hash of (request seed or group id, i, p)
into `vocab`. So a seeded request repeats exactly, choices differ, and a preempted request
recomputes the very same tokens (as greedy decoding would on a real model). `vocab` holds
word-like tokens and never an end-of-sequence token: lengths are set by max_tokens (what a
load test wants), and text decodes and re-tokenizes cleanly, so usage counts match the text.

Pacing: a step is modelled to end `step_time` after the moment its work began, which the
engine loop reports through `begin_step` (right after the previous step when it runs
back-to-back, so the host's scheduling and output handling count inside the modelled time
as a GPU would overlap them). A step that begins at most `catch_up_s` after the previous
step's modelled end starts at that end instead, so sleep overshoot does not accumulate.
Measured step periods therefore equal the model's until the host's own per-step work
exceeds the modelled time; `StepRecord`s let a benchmark check that.
"""

from __future__ import annotations

import math
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from reference_engine.clock import HOST_CLOCK, Clock
from reference_engine.engine import StepResult, TokenLogprob
from reference_engine.request import Request
from reference_engine.scheduler_output import SchedulerOutput
from reference_engine.sim.cost_model import StepTimeModel

_MASK64 = (1 << 64) - 1


def drawn_token(seed: int, index: int, position: int, vocab: Sequence[int]) -> int:
    """The token choice `index` of a request seeded `seed` draws at `position`."""
    return vocab[_mix(seed ^ _mix((index << 40) ^ position)) % len(vocab)]


def _mix(x: int) -> int:
    """splitmix64's finaliser: a cheap, well-mixed 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One simulated step: the model's time, and the time from the step's start (as reported
    to `begin_step`) to the end of `execute` as the engine's clock saw it."""

    num_seqs: int
    num_tokens: int
    modelled_s: float
    measured_s: float


class SimExecutor:
    """Implements the engine's Executor protocol. Not thread-safe: the engine thread owns it.
    `clock` must be the engine's (`build_sim_engine` hands the same one to both); `sleep=False`
    lets no time pass for the modelled steps (a benchmark that counts memory, not time)."""

    def __init__(
        self,
        cost: StepTimeModel,
        vocab: Sequence[int],
        *,
        sleep: bool = True,
        clock: Clock = HOST_CLOCK,
        history: int = 4096,
        catch_up_s: float = 0.005,
    ):
        if not vocab:
            raise ValueError("the simulator needs a non-empty vocabulary to draw tokens from")
        self.cost = cost
        self.vocab = list(vocab)
        self.sleep = sleep
        self.clock = clock
        self.records: deque[StepRecord] = deque(maxlen=history)
        self.modelled_total_s = 0.0
        self.catch_up_s = catch_up_s
        self._step_start: float | None = None
        self._last_end: float | None = None  # modelled end of the previous step
        self._uniform_logprob = -math.log(len(self.vocab))

    def begin_step(self, t: float) -> None:
        """The engine loop's pacing hook: the step whose `execute` comes next began at `t`."""
        last = self._last_end
        self._step_start = last if last is not None and 0.0 <= t - last <= self.catch_up_s else t

    def execute(self, out: SchedulerOutput) -> StepResult:
        start = self._step_start if self._step_start is not None else self.clock.now()
        self._step_start = None
        batch = [(c.num_new_tokens, c.end) for c in out.chunks]
        timed = getattr(self.cost, "step_time_at", None)  # a model of a speed that drifts in time
        modelled = timed(batch, start) if timed is not None else self.cost.step_time(batch)
        result = StepResult(sampled={})
        for chunk in out.chunks:
            request = chunk.request
            params = request.sampling_params
            if params.prompt_logprobs is not None and chunk.start < request.num_prompt_tokens:
                result.prompt_logprobs[request.request_id] = {
                    pos: self._logprob(request.token_ids[pos], params.prompt_logprobs, request, pos)
                    for pos in range(max(1, chunk.start), min(chunk.end, request.num_prompt_tokens))
                }
            if not chunk.samples:
                continue
            fork = request.num_output_tokens == 0 and request.index == 0 and params.n > 1
            indices = range(params.n) if fork else (request.index,)
            tokens = [self.draw(request, i, chunk.end) for i in indices]
            result.sampled[request.request_id] = tokens
            if params.logprobs is not None:
                result.logprobs[request.request_id] = [
                    self._logprob(t, params.logprobs, request, chunk.end) for t in tokens
                ]
        if self.sleep:
            self.clock.advance(start + modelled - self.clock.now())
        self.modelled_total_s += modelled
        self._last_end = start + modelled
        self.records.append(
            StepRecord(len(out.chunks), out.num_batched_tokens, modelled, self.clock.now() - start)
        )
        return result

    def _seed(self, request: Request) -> int:
        seed = request.sampling_params.seed
        return seed & _MASK64 if seed is not None else zlib.crc32(request.group_id.encode())

    def draw(self, request: Request, index: int, position: int) -> int:
        return drawn_token(self._seed(request), index, position, self.vocab)

    def _logprob(self, token: int, top_k: int, request: Request, position: int) -> TokenLogprob:
        """A flat distribution over the vocabulary: every token has -ln(len(vocab)). The top-k
        list is the token itself and k-1 further draws, so shapes match a real model's."""
        lp = self._uniform_logprob
        top = [(token, lp)]
        for j in range(1, top_k):
            top.append(
                (self.vocab[_mix(self._seed(request) ^ _mix((j << 50) ^ position)) % len(self.vocab)], lp)
            )
        return TokenLogprob(token, lp, top if top_k > 0 else [])
