"""The engine's one clock.

Every time the engine stamps (a request's arrival when none is given, its first scheduling,
first token and finish, a sampled block's allocation, access and eviction) and every wait the
simulator's executor makes reads the one `Clock` the engine was built with; it is handed down
at construction and never swapped afterwards.

A served engine runs on `HostClock`: `time.monotonic()`, which on Linux is one system-wide
clock, so the API server's arrival stamps and the engine core's stamps are comparable. A replay
runs on a `VirtualClock`: advancing it is the modelled passage of time (a step's modelled
duration, the jump to the next arrival), so every stamp lies on the trace's time axis however
little wall time the replay takes.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on this clock's axis (monotonic: never less than an earlier reading)."""
        ...

    def advance(self, seconds: float) -> None:
        """Let `seconds` pass (none when not positive): the host waits, a virtual clock jumps."""
        ...


class HostClock:
    """The host's monotonic clock; advancing it sleeps."""

    def now(self) -> float:
        return time.monotonic()

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


HOST_CLOCK = HostClock()


class VirtualClock:
    """Modelled time from `t` (0 by default): it moves only when advanced."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += max(0.0, seconds)

    def advance_to(self, t: float) -> None:
        """Jump forward to `t` (the next arrival); a `t` in the past leaves the clock as it is."""
        self.t = max(self.t, t)
