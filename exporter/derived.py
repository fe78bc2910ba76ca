"""Windowed values and live advice per engine instance, from a target's recent points.

A pure function of a list of points, so the scrape loop can run it on a worker thread over
a copy of the ring buffer (points are never changed once appended, except that older ones
lose their histograms, which nothing here reads). One pass selects the window; the cost is
the window's points times the instances, which is why it does not run on the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from exporter.diagnosis import Diagnosis, Thresholds, diagnose
from exporter.quantities import Key
from exporter.series import Point, hit_ratio, preemption_rate


@dataclass(slots=True)
class Derived:
    hit_ratio: float | None
    preemption_rate: float | None
    diagnosis: Diagnosis

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefix_cache_hit_ratio": self.hit_ratio,
            "preemptions_per_second": self.preemption_rate,
            "advice": {a: v for a, v in self.diagnosis.advice.items()},
            "advice_reasons": dict(self.diagnosis.reasons),
        }


def derive(points: Sequence[Point], window_s: float, thresholds: Thresholds) -> dict[Key, Derived]:
    """Derived values for every instance of the latest point, over the `window_s` seconds
    before it (up points only), as `TargetSeries.window` selects them."""
    if not points or not points[-1].up:
        return {}
    start = points[-1].t - window_s
    recent = [p for p in points if p.t > start and p.up]
    out: dict[Key, Derived] = {}
    for key in points[-1].instances:
        window = [(p.t, p.instances[key]) for p in recent if key in p.instances]
        out[key] = Derived(hit_ratio(window), preemption_rate(window), diagnose(window, thresholds))
    return out
