"""Admission in turns: at most `per_turn` requests start their admission work (reading and
parsing the body, tokenizing, submitting, the response's headers: ~150 us each on a 2-core VM)
per event-loop iteration.

An event loop runs the callbacks that were ready when an iteration began, then polls for I/O.
A burst of arrivals wakes all its handlers in one iteration, so the engine core's outputs that
come in meanwhile wait for the whole burst: at 256 requests at once, streams' first tokens were
written 12-57 ms after the core produced them. In turns, the loop polls for I/O (the core's
outputs, new connections) between turns; the burst as a whole is admitted as fast as before.
(Each request also routes the outputs already waiting before its own work:
`AsyncEngine.route_waiting`.)
"""

from __future__ import annotations

import asyncio
from collections import deque

# Requests whose admission starts in one event-loop iteration.
PER_TURN = 8


class AdmissionTurns:
    def __init__(self, per_turn: int = PER_TURN):
        self.per_turn = per_turn
        self.taken = 0  # turns taken since the last `_next_turn`
        self.waiting: deque[asyncio.Future[None]] = deque()
        self.scheduled = False

    async def take(self) -> None:
        """Return when this request may start its admission work."""
        if self.taken < self.per_turn and not self.waiting:
            self.taken += 1
            self._schedule()
            return
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        self._schedule()
        await future  # a handler cancelled meanwhile leaves a cancelled future: skipped

    def _schedule(self) -> None:
        if not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self._next_turn)

    def _next_turn(self) -> None:
        # Runs in the iteration after the turns it ends (call_soon), so I/O is polled between.
        self.scheduled = False
        self.taken = 0
        while self.waiting and self.taken < self.per_turn:
            future = self.waiting.popleft()
            if not future.done():
                future.set_result(None)
                self.taken += 1
        if self.taken:
            self._schedule()
