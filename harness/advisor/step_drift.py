"""How the server's speed drifted over the run, relative to its fitted step model.

A server on a shared machine (the bundled CPU engine next to other work, a GPU shared by
other tenants) does not run at one speed: the same batch took 90 ms in one minute of a
measured run and 350 ms in the next. A step model fitted over the whole run is then wrong
most of the time, and a replay on it is fast where the run was slow and slow where it was
fast. The residuals of the fit show this as structure over time, so the drift is fitted too:
the fit's rows in time order, cut into groups of at least MIN_ROWS_PER_KNOT, each group's
median observed/fitted ratio a knot at the group's median time; between knots the factor is
interpolated, outside them held. The factors are normalised so their median over the rows is
1 (the fit's coefficients stay the run's typical speed).

A replay on the run's own seconds multiplies each step by the factor at the step's start
(`OnRunClock`, the simulator's `step_time_at` hook), so its baseline sees the machine the run
saw; a what-if is then "this run, on that machine, at those times, with the change".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

MIN_ROWS_PER_KNOT = 6
MAX_KNOTS = 16


@dataclass(frozen=True, slots=True)
class Drift:
    """Speed factors (step time over the fit's) at unix times, in time order."""

    times_unix: tuple[float, ...]
    factors: tuple[float, ...]

    def at(self, t_unix: float | np.ndarray) -> np.ndarray:
        return np.interp(t_unix, self.times_unix, self.factors)

    @property
    def spread(self) -> float:
        """Slowest over fastest knot."""
        return max(self.factors) / min(self.factors)

    def to_dict(self) -> dict:
        return {"times_unix": list(self.times_unix), "factors": [round(f, 4) for f in self.factors]}


def fit_drift(times_unix: np.ndarray, ratio: np.ndarray) -> Drift | None:
    """The drift from rows at `times_unix` whose observed/fitted time is `ratio`; None with
    too few rows for two knots."""
    ok = np.isfinite(times_unix) & np.isfinite(ratio) & (ratio > 0)
    times_unix, ratio = times_unix[ok], ratio[ok]
    knots = min(MAX_KNOTS, len(ratio) // MIN_ROWS_PER_KNOT)
    if knots < 2:
        return None
    order = np.argsort(times_unix, kind="stable")
    groups = np.array_split(order, knots)
    times = [float(np.median(times_unix[g])) for g in groups]
    factors = np.array([float(np.median(ratio[g])) for g in groups])
    drift = Drift(tuple(times), tuple(factors))
    norm = float(np.median(drift.at(times_unix)))
    return Drift(tuple(times), tuple(float(f) for f in factors / norm))


class StepModel(Protocol):
    def step_time(self, batch: Sequence[tuple[int, int]]) -> float: ...


@dataclass(frozen=True, slots=True)
class OnRunClock:
    """A step model with the run's drift, for a replay whose time 0 is `t0_unix` of the run
    and whose seconds are the run's divided by `scale`."""

    model: StepModel
    drift: Drift
    t0_unix: float
    scale: float = 1.0

    def step_time(self, batch: Sequence[tuple[int, int]]) -> float:
        return self.model.step_time(batch)

    def step_time_at(self, batch: Sequence[tuple[int, int]], t: float) -> float:
        return self.model.step_time(batch) * float(self.drift.at(self.t0_unix + t / self.scale))
