"""The engine runs in its own thread; the event loop only ever talks to it through messages.

Why a thread: a step (a forward pass, or the simulator's modelled sleep) takes milliseconds
to seconds; on the event loop it would stall every stream, `/metrics` and `/health` for that
long. The engine itself is not thread-safe, so it is touched by exactly one thread.

Handover:
- loop -> engine: `submit`, `release`, `abort_all` and `stop` put typed `Command`s (see
  events) on a `queue.SimpleQueue` (thread-safe, wakes the engine thread when it is idle);
- engine -> loop: after each iteration the engine thread hands one batch, {stream: [events]},
  to the event loop with a single `loop.call_soon_threadsafe`, which puts each stream's
  events on its own `asyncio.Queue`. One wake-up per step, not one per token, is what keeps
  500 concurrent streams cheap.

Invariants: a stream's events arrive in engine order; a stream gets exactly one terminal
event (`Outcome` or `Failed`) unless it is aborted; an aborted request's blocks are freed
by the engine thread before it takes the next command or step.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from reference_engine.engine import LLMEngine, SequenceOutput, TokenLogprob
from reference_engine.request import RequestStatus
from reference_engine.sampling_params import InvalidRequestError
from reference_engine.server.errors import bad_request, engine_failed, internal_error
from reference_engine.server.events import (
    AbortRequest,
    AddRequest,
    Admitted,
    Command,
    Delta,
    Event,
    Failed,
    Outcome,
    PromptLogprobs,
    RequestStream,
    Shutdown,
    Submission,
)
from reference_engine.server.metrics import VllmMetrics
from reference_engine.server.timing import RequestTiming

log = logging.getLogger("kvscope.server")
# How long the engine thread may take to act on aborts (applied between steps, so this bounds
# one step plus the abort bookkeeping): the wait for aborted streams to end, and for the
# thread to stop.
ABORT_WAIT_S = 5.0


@dataclass(slots=True)
class _Tracked:
    """Engine-thread state of one live request."""

    stream: RequestStream
    sub: Submission
    sequences: list  # the engine group's list of sequences (grows when n > 1 forks)
    prompt_logprobs: dict[int, TokenLogprob]
    last_token_time: list[float | None]
    finished_indices: set[int] = field(default_factory=set)
    started: bool = False


class EngineLoop:
    """Owns the engine thread. `submit`, `abort`, `stop` and `num_in_flight` are for the
    event loop thread; everything prefixed `_` runs on the engine thread.

    `on_step_start(t)` (the simulator's pacing hook) is called before each step with the time
    the step's work began: right after the previous step when the engine is continuously busy
    (so output handling and scheduling count inside the step), or the wake-up time after idle.
    """

    def __init__(
        self,
        engine: LLMEngine,
        metrics: VllmMetrics | None,
        loop: asyncio.AbstractEventLoop,
        on_step_start: Callable[[float], None] | None = None,
    ):
        self.engine = engine
        self.metrics = metrics
        self.loop = loop
        self.on_step_start = on_step_start
        self.failed: BaseException | None = None
        self._inbox: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="kvscope-engine", daemon=True)
        self._live: dict[str, RequestStream] = {}  # event-loop side view of in-flight requests
        self._tracked: dict[str, _Tracked] = {}  # engine-thread side
        self._outbox: dict[RequestStream, list[Event]] = {}
        self._next_step_start: float | None = None

    # -- event loop side -------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def num_in_flight(self) -> int:
        return len(self._live)

    def submit(self, sub: Submission) -> RequestStream:
        if self.failed is not None or not self._thread.is_alive():
            raise engine_failed()
        stream = RequestStream(sub.request_id)
        self._live[sub.request_id] = stream
        self._inbox.put(AddRequest(sub, stream))
        return stream

    def release(self, stream: RequestStream) -> None:
        """The consumer is finished with `stream`: abort it in the engine unless it ended."""
        self._live.pop(stream.request_id, None)
        if not stream.done:
            self._inbox.put(AbortRequest(stream.request_id))

    def abort_all(self) -> None:
        """Abort every in-flight request on the server's behalf (shutdown): unlike a client
        abort, each stream is told, and ends with finish_reason "abort"."""
        for request_id in list(self._live):
            self._inbox.put(AbortRequest(request_id, notify=True))

    def stop(self, timeout: float = ABORT_WAIT_S) -> None:
        """Abort whatever is left and end the thread."""
        self._inbox.put(Shutdown())
        self._thread.join(timeout)

    def _dispatch(self, batch: dict[RequestStream, list[Event]]) -> None:
        for stream, events in batch.items():
            stream.queue.put_nowait(events)

    # -- engine thread -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._take_commands(block=not self.engine.has_unfinished()):
                if self.engine.has_unfinished():
                    self._step()
                else:
                    self._next_step_start = None
                self._flush()
        except BaseException as exc:  # noqa: BLE001 - the engine is unusable after any step failure
            log.exception("engine step failed; the server will refuse further requests")
            self.failed = exc
            for tracked in self._tracked.values():
                self._send(tracked.stream, Failed(engine_failed()))
            self._tracked.clear()
            self._flush()
            self._refuse_forever()
            return
        for request_id in list(self._tracked):
            self._abort(request_id, notify=True)
        self._flush()

    def _refuse_forever(self) -> None:
        while True:
            match self._inbox.get():
                case Shutdown():
                    return
                case AddRequest(stream=stream):
                    self._send(stream, Failed(engine_failed()))
                    self._flush()

    def _take_commands(self, block: bool) -> bool:
        """Apply queued commands; wait for one first if the engine is idle. False on stop."""
        while True:
            try:
                command = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            match command:
                case Shutdown():
                    return False
                case AddRequest(submission, stream):
                    self._add(submission, stream)
                case AbortRequest(request_id, notify):
                    self._abort(request_id, notify)

    def _add(self, sub: Submission, stream: RequestStream) -> None:
        try:
            self.engine.add_request(sub.prompt_token_ids, sub.params, sub.request_id, sub.arrival_time)
        except InvalidRequestError as exc:
            self._send(stream, Failed(bad_request(str(exc), exc.param)))
            return
        except Exception:
            log.exception("add_request failed for %s", sub.request_id)
            self._send(stream, Failed(internal_error()))
            return
        group = self.engine.groups[sub.request_id]
        self._tracked[sub.request_id] = _Tracked(
            stream, sub, group.sequences, group.prompt_logprobs, [None] * sub.params.n
        )
        self._send(stream, Admitted())

    def _abort(self, request_id: str, notify: bool) -> None:
        tracked = self._tracked.pop(request_id, None)
        if tracked is None:
            return  # finished (or refused) before the abort arrived
        self.engine.abort(request_id)
        if self.metrics is not None:
            for seq in tracked.sequences:
                if seq.status == RequestStatus.FINISHED_ABORTED:
                    self.metrics.observe_finished(seq, "abort")
        if notify:
            for index in range(tracked.sub.params.n):
                if index not in tracked.finished_indices:
                    self._send(tracked.stream, Delta(index, [], "", [], "abort"))
            self._send(tracked.stream, self._outcome(tracked))

    @staticmethod
    def _outcome(tracked: _Tracked) -> Outcome:
        first = tracked.sequences[0]
        return Outcome(
            prompt_tokens=first.num_prompt_tokens,
            completion_tokens=sum(s.num_output_tokens for s in tracked.sequences),
            cached_tokens=max(0, first.num_cached_tokens),
            timing=RequestTiming.from_sequences(tracked.sequences, tracked.sub.arrival_unix),
        )

    def _step(self) -> None:
        start = self._next_step_start or time.monotonic()
        if self.on_step_start is not None:
            self.on_step_start(start)
        steps_before = self.engine.stats.steps
        outputs = self.engine.step()
        self._next_step_start = time.monotonic()
        if self.engine.stats.steps == steps_before:
            time.sleep(0.001)  # nothing could be scheduled this round; do not spin
        for output in outputs:
            self._on_output(output, self._next_step_start)
        if self.metrics is not None:
            self.metrics.observe_step(self.engine.stats)

    def _on_output(self, out: SequenceOutput, now: float) -> None:
        seq = out.request
        tracked = self._tracked.get(seq.group_id)
        if tracked is None:
            return
        if not tracked.started:
            tracked.started = True
            if tracked.sub.params.prompt_logprobs is not None:
                self._send(tracked.stream, PromptLogprobs(dict(tracked.prompt_logprobs)))
        last = tracked.last_token_time[out.index]
        if self.metrics is not None:
            if last is None and seq.first_token_time is not None:
                self.metrics.observe_first_token(seq.first_token_time - seq.arrival_time)
            elif last is not None:
                self.metrics.observe_inter_token(now - last)
        tracked.last_token_time[out.index] = now
        self._send(
            tracked.stream,
            Delta(out.index, out.new_token_ids, out.new_text, out.new_logprobs, out.finish_reason),
        )
        if not out.finished:
            return
        tracked.finished_indices.add(out.index)
        if self.metrics is not None:
            self.metrics.observe_finished(seq, out.finish_reason or "abort")
        if len(tracked.finished_indices) == tracked.sub.params.n:
            del self._tracked[seq.group_id]
            self._send(tracked.stream, self._outcome(tracked))

    def _send(self, stream: RequestStream, event: Event) -> None:
        self._outbox.setdefault(stream, []).append(event)

    def _flush(self) -> None:
        if not self._outbox:
            return
        batch, self._outbox = self._outbox, {}
        try:
            self.loop.call_soon_threadsafe(self._dispatch, batch)
        except RuntimeError:
            pass  # the event loop is closed: nobody is listening any more
