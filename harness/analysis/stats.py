"""Distribution summaries shared by every analysis module.

Invariants:
- Percentiles use numpy's default (linear interpolation between order statistics), so a
  test or a notebook recomputing them with `np.percentile` gets the same numbers.
- NaN values are dropped before summarising; an empty input gives count 0 and None
  everywhere (never 0.0: "no data" and "zero latency" lead to opposite conclusions).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

PERCENTILES: tuple[int, ...] = (50, 90, 95, 99)


@dataclass(frozen=True, slots=True)
class Distribution:
    """count, mean, min, max and p50/p90/p95/p99 of one quantity (seconds or tokens)."""

    count: int
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def get(self, name: str) -> float | None:
        return getattr(self, name)


def clean(values: Iterable[float] | np.ndarray) -> np.ndarray:
    """Finite float values only (None, NaN and inf dropped)."""
    arr = np.asarray(
        [v for v in values if v is not None] if not isinstance(values, np.ndarray) else values, dtype=float
    )
    return arr[np.isfinite(arr)]


def distribution(values: Iterable[float] | np.ndarray) -> Distribution:
    arr = clean(values)
    if arr.size == 0:
        return Distribution(0)
    qs = np.percentile(arr, PERCENTILES)
    return Distribution(
        int(arr.size), float(arr.mean()), float(arr.min()), float(arr.max()), *(float(q) for q in qs)
    )
