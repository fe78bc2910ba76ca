"""When a replayed request reaches the engine: at its recorded time (open loop), or, for a
request of a user's chain (closed loop), a recorded gap after that user's previous request
finished in the replay.

A closed-loop load test has N users, each sending its next request when its previous answer
is in (plus any think time). Replaying such a run at its recorded send times would be wrong
both ways: a replayed server slower than the run would see requests pile up that the real
users never sent (they were still waiting), and a faster one would idle where real users
would already have sent again. So each chain's first request arrives at its recorded time,
and each later one `after_s` after its predecessor finished (or was refused) in the replay.

Invariants: every request is released exactly once; a chained request is released only
after its predecessor is `done`; release order is by arrival time, then trace index.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from typing import Protocol


class Arriving(Protocol):
    arrival_s: float
    chain: int
    after_s: float


class Arrivals:
    """The replay's pending requests, by trace index."""

    def __init__(self, trace: Sequence[Arriving]) -> None:
        self._heap: list[tuple[float, int]] = []
        self._next: dict[int, deque[int]] = {}  # chain -> its later requests, in order
        self._chain_of: dict[int, int] = {}
        self._trace = trace
        heads: set[int] = set()
        for i in sorted(range(len(trace)), key=lambda k: (trace[k].arrival_s, k)):
            chain = trace[i].chain
            if chain >= 0:
                self._chain_of[i] = chain
                if chain in heads:
                    self._next.setdefault(chain, deque()).append(i)
                    continue
                heads.add(chain)
            heapq.heappush(self._heap, (trace[i].arrival_s, i))

    def __bool__(self) -> bool:
        return bool(self._heap) or any(self._next.values())

    def next_time(self) -> float | None:
        """When the next released request is due (None: none is released yet: every
        remaining one waits on a predecessor still running)."""
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> list[tuple[float, int]]:
        """(release time, trace index) of the requests due by `now`, in release order."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            out.append(heapq.heappop(self._heap))
        return out

    def done(self, index: int, now: float) -> None:
        """Request `index` finished (or was refused) at `now`: its chain's next one is
        released `after_s` later."""
        chain = self._chain_of.get(index)
        queue = self._next.get(chain) if chain is not None else None
        if queue:
            following = queue.popleft()
            heapq.heappush(self._heap, (now + max(0.0, self._trace[following].after_s), following))
