"""The messages between the event loop and the engine thread, and a request's stream end.

Loop -> engine: one `Command` at a time on the engine's inbox (`AddRequest` carrying a
`Submission`, `AbortRequest`, `Shutdown`). Engine -> loop: lists of `Event`s on the request's
`RequestStream`, in engine order: `Admitted` (or `Failed`) first, then `PromptLogprobs` once
if asked for, `Delta`s, and finally `Outcome` (or `Failed`). All frozen: once handed to the
other thread, nothing in them changes.
"""

from __future__ import annotations

import asyncio
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


# -- commands, event loop -> engine thread ----------------------------------------------


@dataclass(frozen=True, slots=True)
class AddRequest:
    """Admit `submission`; its events go to `stream`."""

    submission: Submission
    stream: RequestStream


@dataclass(frozen=True, slots=True)
class AbortRequest:
    """Stop a request and free its blocks. A client abort (the client left) is silent; a
    server abort (`notify`, at shutdown) tells the stream, whose choices end with "abort"."""

    request_id: str
    notify: bool = False


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Abort whatever is still running and end the engine thread."""


Command = AddRequest | AbortRequest | Shutdown


# -- events, engine thread -> one stream ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admitted:
    """The engine accepted the request (its own checks passed); a stream may start."""


@dataclass(frozen=True, slots=True)
class PromptLogprobs:
    """Logprobs of prompt positions 1.. (position 0 has none); sent once, before the first Delta."""

    by_position: dict[int, TokenLogprob]


@dataclass(frozen=True, slots=True)
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


@dataclass(eq=False, slots=True)
class RequestStream:
    """The event loop's end of one request. `done` is set by the consumer once it has seen a
    terminal event, so that its cleanup knows not to abort."""

    request_id: str
    queue: asyncio.Queue[list[Event]] = field(default_factory=asyncio.Queue)
    done: bool = False

    async def next_events(self) -> list[Event]:
        return await self.queue.get()
