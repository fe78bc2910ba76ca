"""What the API server's request handlers receive: a request's `Submission` going in, and the
`Event`s of its `RequestStream` coming out.

Events arrive in batches, one per engine-core iteration, in core order: `Admitted` (or
`Failed`) first, then `PromptLogprobs` once if asked for, `Delta`s, and finally `Outcome`
(or `Failed`). Once handed over, nothing in them changes (all frozen but `Delta`, which is made
for every token of every stream and skips frozen's cost).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from reference_engine.engine import TokenLogprob
from reference_engine.sampling_params import SamplingParams
from reference_engine.server.errors import APIError
from reference_engine.server.timing import RequestTiming


@dataclass(frozen=True, slots=True)
class Submission:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float  # monotonic, stamped when the HTTP request arrived
    arrival_unix: float


# -- events, to one stream ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admitted:
    """The request passed admission (`check_admission`) and went to the core; a stream may start."""


@dataclass(frozen=True, slots=True)
class PromptLogprobs:
    """Logprobs of prompt positions 1.. (position 0 has none); sent once, before the first Delta."""

    by_position: dict[int, TokenLogprob]


@dataclass(slots=True)  # not frozen: made per token per stream, and frozen init costs more
class Delta:
    index: int
    token_ids: list[int]
    text: str
    logprobs: list[TokenLogprob]
    finish_reason: str | None


@dataclass(frozen=True, slots=True)
class Outcome:
    """Every choice finished. `completion_tokens` sums over choices."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    timing: RequestTiming


@dataclass(frozen=True, slots=True)
class Failed:
    error: APIError


Event = Admitted | PromptLogprobs | Delta | Outcome | Failed


Sink = Callable[[float, list[Event]], bool]
TextSink = Callable[[float, str], bool]


@dataclass(eq=False, slots=True)
class RequestStream:
    """The handler's end of one request. Queue items are (produced, events): the core's
    monotonic timestamp of the iteration that produced the events (0.0 for events the server
    made itself), which `next_events` keeps in `produced` for the writer's delay metric.

    `sink`, while set, takes each batch as it is routed (`put`), before anything is queued: the
    SSE writer writes it then and there instead of waking its handler, and answers False when
    it cannot (a slow client's full buffer), which queues the batch for the handler and drops
    the sink. The handler sets it again only as it takes the queue's batches, without yielding
    in between, so while a sink is set nothing is queued and events never overtake one another.
    (The server's own terminal events, a rejection or a failure, go straight to the queue: nothing
    follows them.)"""

    request_id: str
    queue: asyncio.Queue[tuple[float, list[Event]]] = field(default_factory=asyncio.Queue)
    produced: float = 0.0
    outcome: Outcome | None = None  # set once every choice finished (the request's span needs it)
    sink: Sink | None = None
    # The writer's shortcut for a delta that is only text (see `put_text`); used with `sink`.
    text_sink: TextSink | None = None

    def put_text(self, produced: float, text: str) -> bool:
        """Hand over a token's text without making it an event, where the writer takes it that
        way (one choice, past its first chunk, no logprobs: a template's text). False when
        there is no sink or it declines: the caller makes the Delta and `put`s it."""
        return self.sink is not None and self.text_sink is not None and self.text_sink(produced, text)

    def put(self, produced: float, events: list[Event]) -> None:
        sink = self.sink
        if sink is None or not sink(produced, events):
            self.sink = None
            self.queue.put_nowait((produced, events))

    async def next_events(self) -> list[Event]:
        """The next batch, and every batch queued behind it: a handler that fell behind the core
        catches up in one write instead of one per step. `produced` is the oldest of the core's
        batches among them (0.0 if none is): behind `Admitted`, which the server made, the first
        tokens' delay is still measured."""
        produced, events = await self.queue.get()
        while not self.queue.empty():
            later, more = self.queue.get_nowait()
            produced = produced or later
            events = events + more
        self.produced = produced
        return events
