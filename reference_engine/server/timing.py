"""Per-request server timings: the `kvscope` object on every final response.

A client measures TTFT and E2E including the network and its own event loop; these are the
server's side of the same request, so the harness can split the two. All durations come from
monotonic stamps: arrival (the HTTP handler's), then first scheduled, first token and finished
(the engine core's, carried across in `SeqTiming`); `arrival_unix` is the one wall-clock value,
to line requests up with scraped metrics.

Invariant: queue_time_s + prefill_time_s == ttft_s, and ttft_s + decode_time_s == e2e_s
(up to rounding), whenever the request was scheduled and produced a token.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

HEADER = "x-kvscope-timing"


class SequenceTimes(Protocol):
    """The stamps of one choice (an engine `Request`, or the server's `ChoiceState`)."""

    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    finished_time: float | None
    num_preemptions: int
    num_cached_tokens: int


def _span(start: float | None, end: float | None) -> float | None:
    if start is None or end is None:
        return None
    return round(max(0.0, end - start), 6)


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """Seconds; None where the request never reached that stage (e.g. aborted while queued).

    For n > 1 the choices share arrival, scheduling and first token (they fork after the
    prefill); decode and e2e run to the last choice to finish, and preemptions are summed.
    """

    queue_time_s: float | None
    prefill_time_s: float | None
    ttft_s: float | None
    decode_time_s: float | None
    e2e_s: float | None
    num_preemptions: int
    cached_prompt_tokens: int
    arrival_unix: float

    @classmethod
    def from_sequences(cls, sequences: Sequence[SequenceTimes], arrival_unix: float) -> RequestTiming:
        first = sequences[0]
        finished = [s.finished_time for s in sequences if s.finished_time is not None]
        last = max(finished) if finished else None
        return cls(
            queue_time_s=_span(first.arrival_time, first.first_scheduled_time),
            prefill_time_s=_span(first.first_scheduled_time, first.first_token_time),
            ttft_s=_span(first.arrival_time, first.first_token_time),
            decode_time_s=_span(first.first_token_time, last),
            e2e_s=_span(first.arrival_time, last),
            num_preemptions=sum(s.num_preemptions for s in sequences),
            cached_prompt_tokens=max(0, first.num_cached_tokens),
            arrival_unix=round(arrival_unix, 6),
        )

    def as_dict(self) -> dict:
        # Every field is a number or None: no need for asdict's recursive deep copy, which
        # cost most of a stream's last chunk when hundreds of streams end in one step.
        return {name: getattr(self, name) for name in self.__slots__}

    def header_value(self) -> str:
        return json.dumps(self.as_dict(), separators=(",", ":"))
