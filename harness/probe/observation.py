"""What one probe request showed of the pool, as data: the occupancy readings taken while it
was alive, reduced to the numbers the fit needs.

Invariant: usage figures are shares of the pool in [0, 1], as the server's own KV usage
metric states them (vLLM's `kv_cache_usage_perc`: blocks held by running requests over the
usable blocks); `peak_usage` is above the idle level read just before the request.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class PoolReading:
    """One read of the pool: None where the server does not say."""

    usage: float | None = None
    running: float | None = None
    waiting: float | None = None
    preemptions: float | None = None


@dataclass(frozen=True, slots=True)
class RequestObservation:
    """One lone request of the ladder and what the pool showed while it was alive.

    `prompt_tokens` / `output_tokens` are the server's own counts (its `usage`), else the
    requested ones. `levels` are the distinct usage values read while it was alive (the
    staircase its blocks climbed), `readings` how many reads saw it alive."""

    requested_prompt_tokens: int
    requested_output_tokens: int
    prompt_tokens: int
    output_tokens: int
    idle_before: float | None = None
    idle_after: float | None = None
    peak_usage: float | None = None  # the highest usage read while alive, minus idle_before
    levels: tuple[float, ...] = ()
    readings: int = 0
    preemptions: float | None = None  # the server's preemption counter's increase
    max_running: float | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def kv_tokens(self) -> int:
        """Tokens whose KV the request holds at its last step: prompt + output - 1 (the last
        output token is returned, never fed back)."""
        return self.prompt_tokens + max(self.output_tokens, 1) - 1

    @property
    def preempted(self) -> bool:
        """Answered, after the server preempted it (the pool could not hold it alone)."""
        return not self.error and (self.preemptions or 0) > 0

    @property
    def unread(self) -> bool:
        """Answered and not preempted, yet never read above the idle level: no read caught it
        alive, or the server's metric does not count it."""
        return not self.error and not self.peak_usage and not self.preempted

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kv_tokens"] = self.kv_tokens
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestObservation:
        names = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in names}
        kw["levels"] = tuple(kw.get("levels") or ())
        return cls(**kw)
