"""Per-target ring buffer of scrapes and the windowed quantities derived from it.

Invariants:
- A Point is one scrape: `up` False means nothing was fetched and `instances` is empty
  (an outage is visible as a run of down points, never as zeros).
- Windowed increases treat any counter drop as a restart from zero (the new value is the
  increase since the restart), like PromQL's `increase()`: a rate is never negative.
- Everything here except TargetSeries is a pure function of its arguments.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from exporter.dialects.sample import EngineSample
from exporter.quantities import Key

Window = Sequence[tuple[float, EngineSample]]


@dataclass(slots=True)
class Point:
    t: float  # Unix time of the scrape start
    up: bool
    instances: dict[Key, EngineSample] = field(default_factory=dict)
    reason: str | None = None


class TargetSeries:
    """Bounded history of one target (oldest points fall off the front): at most `maxlen`
    points and at most `max_samples` engine samples in all, but never fewer than 2 points.

    The sample bound keeps a target with many instances from holding a lot of memory: a
    retained sample costs ~1.2 KB, so 1,000 instances over 900 scrapes would be ~1 GB; with
    that many instances the history is simply shorter. Only the latest point keeps its
    latency histograms: the windowed rules read scalars, and a histogram costs ~1.5 KB per
    instance and scrape. `--record` writes every histogram before it is dropped here.
    """

    __slots__ = ("points", "max_samples", "_samples")

    def __init__(self, maxlen: int, max_samples: int | None = None) -> None:
        self.points: deque[Point] = deque(maxlen=max(2, maxlen))
        self.max_samples = max_samples
        self._samples = 0  # engine samples in `points`

    def append(self, point: Point) -> None:
        if self.points:
            for sample in self.points[-1].instances.values():
                sample.histograms = {}
            if len(self.points) == self.points.maxlen:
                self._samples -= len(self.points[0].instances)  # about to fall off
        self.points.append(point)
        self._samples += len(point.instances)
        while self.max_samples is not None and self._samples > self.max_samples and len(self.points) > 2:
            self._samples -= len(self.points.popleft().instances)

    def latest(self) -> Point | None:
        return self.points[-1] if self.points else None

    def since(self, t: float) -> list[Point]:
        """Points with `t_point > t`, oldest first."""
        out = []
        for p in reversed(self.points):
            if p.t <= t:
                break
            out.append(p)
        out.reverse()
        return out

    def window(self, key: Key, seconds: float) -> list[tuple[float, EngineSample]]:
        """(t, sample) of `key` over the last `seconds` before the latest point (up points only)."""
        last = self.latest()
        if last is None:
            return []
        return [(p.t, p.instances[key]) for p in self.since(last.t - seconds) if p.up and key in p.instances]


def increase(values: Iterable[tuple[float, float | None]]) -> float | None:
    """Reset-aware increase of a counter over (t, value) pairs; None with < 2 known values."""
    total, prev, known = 0.0, None, 0
    for _, v in values:
        if v is None:
            continue
        known += 1
        if prev is not None:
            total += v - prev if v >= prev else v  # a drop is a restart: count from zero
        prev = v
    return total if known >= 2 else None


def rate(values: Sequence[tuple[float, float | None]]) -> float | None:
    """Per-second reset-aware rate between the first and last known values."""
    known = [(t, v) for t, v in values if v is not None]
    if len(known) < 2 or known[-1][0] <= known[0][0]:
        return None
    inc = increase(known)
    return None if inc is None else inc / (known[-1][0] - known[0][0])


def counter_values(window: Window, quantity: str) -> list[tuple[float, float | None]]:
    return [(t, getattr(s, quantity)) for t, s in window]


def hit_ratio(window: Window) -> float | None:
    """Prefix-cache hits / queries over the window; None when nothing was queried."""
    q = increase(counter_values(window, "prefix_cache_queries_tokens"))
    h = increase(counter_values(window, "prefix_cache_hits_tokens"))
    if q is None or h is None or q <= 0:
        return None
    return min(1.0, max(0.0, h / q))


def preemption_rate(window: Window) -> float | None:
    """Preemption events per second over the window."""
    return rate(counter_values(window, "preemptions"))
