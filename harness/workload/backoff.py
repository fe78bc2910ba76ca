"""Back off from a target that does not answer, so a dead server is not hammered at loop speed.

One `Backoff` per Locust process (on its `RunContext`), shared by its users: a request whose
connection failed (refused, reset, broken off mid-stream) closes the gate for
BASE_S x 2^(failures in a row - 1), at most CAP_S, with a little jitter so users do not
return in one wave; every user waits for the gate before its next request. Any HTTP answer
(even an error status: the server is there) opens it again and resets the count. With the
gate shared, a dead server costs each process a handful of failures per CAP_S, not
thousands a second, while the run notices and stops (`harness.run.liveness`).

Timeouts are not connection failures here: a slow server is loaded, not gone, and backing
off would change the load being measured.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

BASE_S = 0.1
CAP_S = 2.0
JITTER = 0.2  # +-20 % of the delay
BACKOFF_CLASSES = frozenset({"connect_error", "stream_error"})


@dataclass(slots=True)
class Backoff:
    base_s: float = BASE_S
    cap_s: float = CAP_S
    failures: int = 0  # connection failures in a row
    until_unix: float = 0.0  # no request leaves before this
    rng: random.Random = field(default_factory=random.Random)

    def delay_s(self) -> float:
        """The wait the current run of failures earns (0 with none)."""
        if not self.failures:
            return 0.0
        return min(self.cap_s, self.base_s * 2.0 ** min(self.failures - 1, 30))

    def record(self, error_class: str | None, answered: bool, now_unix: float) -> None:
        """One finished request (`answered`: it got an HTTP status): a connection failure
        closes the gate longer, an answer opens it; anything else (a timeout, an abort)
        leaves it as it is."""
        if error_class in BACKOFF_CLASSES:
            self.failures += 1
            delay = self.delay_s() * (1.0 + self.rng.uniform(-JITTER, JITTER))
            self.until_unix = max(self.until_unix, now_unix + delay)
        elif answered:
            self.failures = 0
            self.until_unix = 0.0
