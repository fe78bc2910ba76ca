"""A warning that a client can trigger at will is logged at most once per interval.

Malformed requests, slow clients and refused connections are each one line, never a
traceback, and a flood of them cannot flood the log: after the first line of an interval the
rest are counted, and the next line that is let through says how many were left out.
One limiter per server (no module state), so servers in one process do not share budgets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_INTERVAL_S = 10.0


@dataclass(slots=True)
class RateLimitedLog:
    logger: logging.Logger
    interval_s: float = DEFAULT_INTERVAL_S
    clock: Callable[[], float] = time.monotonic
    _next_at: float = field(default=float("-inf"), init=False)
    _suppressed: int = field(default=0, init=False)

    def warning(self, message: str, *args: object) -> bool:
        """Log `message % args` as one WARNING line unless one was logged less than
        `interval_s` ago. True if it was logged."""
        now = self.clock()
        if now < self._next_at:
            self._suppressed += 1
            return False
        if self._suppressed:
            message += " (and %d more like it since the last one logged)"
            args = (*args, self._suppressed)
        self.logger.warning(message, *args)
        self._next_at = now + self.interval_s
        self._suppressed = 0
        return True
