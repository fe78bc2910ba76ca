"""Open-loop arrival schedules: when each request *should* be sent, whatever the server does.

A closed loop (N users, each sending when its last answer came back) slows its own arrivals
when the server slows down, and the latency percentiles then hide the queueing a real
population of users would see ("coordinated omission"). Here arrivals come from a fixed
schedule; a request that leaves late records its lag (`schedule_lag_s = send - scheduled`),
so client saturation or too few in-flight slots show up in the data instead of vanishing.

Distribution across workers: every worker generates the *same* global sequence (same seed,
same start time `t0`) and takes every `worker_count`-th arrival starting at `worker_index`.
The union over workers is therefore exactly the global schedule — a Poisson process stays
Poisson, a constant rate stays evenly spaced — however many workers share it. A payload with
a `shard` (a replayed session's turns) goes to worker `shard % worker_count` instead, so
every turn of one session is sent by one process, in order.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

ArrivalKind = Literal["poisson", "constant"]


@dataclass(frozen=True, slots=True)
class Slot:
    index: int  # position in the global schedule
    scheduled_unix: float
    payload: Any = None  # e.g. a trace entry with the lengths to use


def poisson_offsets(rate: float, seed: int) -> Iterator[tuple[float, None]]:
    """Exponential gaps with mean 1/rate: a Poisson process of `rate` requests per second."""
    rng = random.Random(seed)
    t = 0.0
    while True:
        yield t, None
        t += rng.expovariate(rate)


def constant_offsets(rate: float) -> Iterator[tuple[float, None]]:
    for k in itertools.count():
        yield k / rate, None


class ArrivalSchedule:
    """This worker's share of a global schedule of (offset seconds, payload) pairs.

    `claim()` is not re-entrant across threads, but gevent greenlets only switch on I/O, so
    concurrent users in one worker never claim the same slot.
    """

    def __init__(
        self,
        offsets: Iterable[tuple[float, Any]],
        t0_unix: float,
        worker_index: int = 0,
        worker_count: int = 1,
    ) -> None:
        if worker_count < 1 or not 0 <= worker_index < worker_count:
            raise ValueError(f"worker {worker_index} of {worker_count} is not a valid share")
        self._it = iter(offsets)
        self._t0 = t0_unix
        self._index = worker_index
        self._count = worker_count
        self._next_global = 0
        self.exhausted = False

    def claim(self) -> Slot | None:
        """The next arrival for this worker, or None when a finite schedule has run out."""
        while not self.exhausted:
            try:
                offset, payload = next(self._it)
            except StopIteration:
                self.exhausted = True
                break
            k = self._next_global
            self._next_global += 1
            shard = getattr(payload, "shard", None)  # a payload may name its worker (trace sessions)
            if (k if shard is None else shard) % self._count == self._index:
                return Slot(k, self._t0 + offset, payload)
        return None


def make_offsets(kind: ArrivalKind, rate: float, seed: int) -> Iterator[tuple[float, None]]:
    if rate <= 0:
        raise ValueError(f"an open-loop rate must be positive, got {rate}")
    if kind == "poisson":
        return poisson_offsets(rate, seed)
    if kind == "constant":
        return constant_offsets(rate)
    raise ValueError(f"unknown arrival process {kind!r} (poisson or constant)")
