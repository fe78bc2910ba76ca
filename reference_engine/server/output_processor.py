"""The API server's half of every request: detokenize core outputs, find stop strings, observe
metrics, and hand each stream its events (vLLM V1's output processor).

Per core iteration (`process`): each choice's new tokens are detokenized incrementally; a
stop string ends the choice here (the core is told to stop it, and what it produces in the
meantime is dropped); per-choice latencies go to the histograms, from the core's timestamps;
and every stream gets one batch with all its events of that iteration, stamped with the
moment the core produced them (so the SSE writer can measure its own delay). A streaming
response writes its batch as it is handed over (`RequestStream.sink`), so the first stream's
chunk leaves before the last stream's is even built.

Invariants: a live request gets `Delta`s in core order and exactly one terminal event
(`Outcome` or `Failed`); a released request (its client left) gets nothing more, but its
state stays until the core has confirmed the end of every choice, so the metrics of an
aborted choice are recorded like any other; each choice is observed as finished once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reference_engine.core.messages import CoreOutputs, Rejection, SeqOutput
from reference_engine.detokenizer import IncrementalDetokenizer, detokenizer_factory
from reference_engine.server.errors import APIError, bad_request, engine_failed
from reference_engine.server.events import (
    Delta,
    Event,
    Failed,
    Outcome,
    PromptLogprobs,
    RequestStream,
    Submission,
)
from reference_engine.server.metrics import VllmMetrics
from reference_engine.server.timing import RequestTiming


@dataclass(slots=True)
class ChoiceState:
    """One choice as the server sees it. Attribute names follow `Request`, so the timing
    object and the metrics read either."""

    detokenizer: IncrementalDetokenizer
    arrival_time: float
    num_prompt_tokens: int
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    num_preemptions: int = 0
    num_cached_tokens: int = 0
    num_output_tokens: int = 0
    last_token_time: float | None = None  # core timestamp of its latest token
    finished: bool = False


@dataclass(slots=True)
class RequestState:
    stream: RequestStream
    sub: Submission
    choices: list[ChoiceState]
    released: bool = False
    num_finished: int = 0
    events: list[Event] = field(default_factory=list)  # of the iteration being processed


class OutputProcessor:
    def __init__(self, tokenizer: Any, metrics: VllmMetrics):
        self.new_detokenizer = detokenizer_factory(tokenizer)
        self.metrics = metrics
        self.requests: dict[str, RequestState] = {}
        # Per-token histogram observations of the iteration being routed, made after its
        # streams were handed their events (`observe_pending`): the writes go first.
        self.pending: list[tuple[Callable[..., None], tuple]] = []
        # The pass's per-token observations: a list append each, where `defer` costs a bound
        # method and a tuple per token per stream. The SSE writers append to `write_delays`.
        self.inter_token_gaps: list[float] = []
        self.write_delays: list[float] = []

    def add(self, sub: Submission, stream: RequestStream) -> None:
        n = sub.params.n
        choices = [
            ChoiceState(
                self.new_detokenizer(sub.params.stop),
                sub.arrival_time,
                len(sub.prompt_token_ids),
            )
            for _ in range(n)
        ]
        self.requests[sub.request_id] = RequestState(stream, sub, choices)

    def release(self, request_id: str) -> bool:
        """The client is gone. True if the core still runs the request (abort it there)."""
        state = self.requests.get(request_id)
        if state is None:
            return False
        state.released = True
        return True

    def process(self, outputs: CoreOutputs) -> list[tuple[str, int]]:
        """Route one iteration's outputs; returns the choices to stop in the core.

        A request's batch is handed over as soon as its last output of the iteration is
        applied, so the first stream's chunk does not wait for the last stream's
        detokenization; the outcomes of requests that ended follow, in batches of their own;
        the statistics are observed after every stream has its batch."""
        now = outputs.timestamp
        requests = self.requests
        last: dict[str, int] | None = None  # built only if a request has several choices
        stops: list[tuple[str, int]] = []
        ended: list[RequestState] = []
        for i, out in enumerate(outputs.outputs):
            state = requests.get(out.request_id)
            if state is None:
                continue
            if out.prompt_logprobs is not None and not state.released:
                state.events.append(PromptLogprobs(out.prompt_logprobs))
            advanced = self._advance(state, out, now, stops)
            if advanced is not None and not state.released:
                text, reason = advanced
                plain = reason is None and out.new_logprobs is None and not state.events
                # The common case, a stream's next token of text only, goes to its writer as
                # is (`put_text`); anything else, or what the writer declines, is a Delta.
                if not (plain and state.stream.put_text(now, text)):
                    lps = out.new_logprobs or []
                    state.events.append(Delta(out.index, out.new_token_ids, text, lps, reason))
            if len(state.choices) > 1:
                if last is None:
                    last = {o.request_id: j for j, o in enumerate(outputs.outputs)}
                if last[out.request_id] != i:
                    continue
            if state.events:
                state.stream.put(now, state.events)
                state.events = []
            if state.num_finished == len(state.choices):
                del requests[out.request_id]
                if not state.released:
                    ended.append(state)
        # A request's outcome (its timings, usage and kvscope object) costs several times a
        # token's chunk to build and write: it goes out after every stream's tokens of the step.
        for state in ended:
            state.stream.outcome = outcome = self._outcome(state)
            state.stream.put(now, [outcome])
        for rejection in outputs.rejected or ():
            self._reject(rejection)
        if outputs.stats is not None:
            self.metrics.observe_stats(outputs.stats)
        return stops

    def defer(self, observe: Callable[..., None], *args: Any) -> None:
        """Observe later, with this iteration's other observations: writes go first."""
        self.pending.append((observe, args))

    def observe_pending(self) -> None:
        pending, self.pending = self.pending, []
        for observe, args in pending:
            observe(*args)
        self.metrics.observe_inter_tokens(self.inter_token_gaps)
        self.metrics.observe_write_delays(self.write_delays)
        self.inter_token_gaps.clear()
        self.write_delays.clear()

    def _advance(
        self, state: RequestState, out: SeqOutput, now: float, stops: list[tuple[str, int]]
    ) -> tuple[str, str | None] | None:
        """Apply `out` to its choice: timings, token counts, detokenization, stop strings and
        the end. (the new text, the finish reason); None for a choice that already ended here."""
        choice = state.choices[out.index]
        if choice.finished:
            return None  # stopped here on a stop string; the core's later tokens are surplus
        timing = out.timing
        if timing is not None:
            choice.first_scheduled_time = timing.first_scheduled_time
            choice.first_token_time = timing.first_token_time
            choice.finished_time = timing.finished_time
            choice.num_preemptions = timing.num_preemptions
            choice.num_cached_tokens = timing.num_cached_tokens
        detok = choice.detokenizer
        cut = -1
        token_ids = out.new_token_ids
        if token_ids:
            last = choice.last_token_time
            if last is not None:
                self.inter_token_gaps.append(now - last)
            elif choice.first_token_time is not None:
                ttft = choice.first_token_time - choice.arrival_time
                self.defer(self.metrics.observe_first_token, ttft)
            choice.last_token_time = now
            choice.num_output_tokens += len(token_ids)
            detok.add(token_ids)
            if detok.stop:
                cut = detok.find_stop()
        reason = out.finish_reason
        if cut >= 0:
            if reason is None:
                stops.append((out.request_id, out.index))
            reason = "stop"
        text = detok.take(reason is not None, cut)
        if reason is not None:
            choice.finished = True
            choice.finished_time = choice.finished_time or now
            state.num_finished += 1
            self.defer(self.metrics.observe_finished, choice, reason)
        return text, reason

    @staticmethod
    def _outcome(state: RequestState) -> Outcome:
        first = state.choices[0]
        return Outcome(
            prompt_tokens=first.num_prompt_tokens,
            completion_tokens=sum(c.num_output_tokens for c in state.choices),
            cached_tokens=first.num_cached_tokens,
            timing=RequestTiming.from_sequences(state.choices, state.sub.arrival_unix),
        )

    def _reject(self, rejection: Rejection) -> None:
        state = self.requests.pop(rejection.request_id, None)
        if state is not None and not state.released:
            error = engine_failed() if rejection.internal else bad_request(rejection.message, rejection.param)
            state.stream.queue.put_nowait((0.0, [Failed(error)]))

    def fail_all(self, error: APIError) -> None:
        """End every request with `error` (the engine failed or is gone)."""
        for state in self.requests.values():
            if not state.released:
                state.stream.queue.put_nowait((0.0, [Failed(error)]))
        self.requests.clear()
