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

Shorter than any knot are stalls: a step the machine held up for a second (another process
took the CPU). The fit leaves such steps out as outliers; those that were one step (a
request's prefill) are kept as stalls instead (`find_stalls`: when the step started, by how
much it overran the model there; one per step), since the requests in flight then waited for
them and the run's TTFT tail is made of such waits.

A replay on the run's own seconds multiplies each step by the factor at the step's start and
adds the stalls that began during it (`OnRunClock`, the simulator's `step_time_at` hook), so
its baseline sees the machine the run saw; a what-if is then "this run, on that machine, at
those times, with the change". A stall that falls while the replay is idle delays nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

MIN_ROWS_PER_KNOT = 6
MAX_KNOTS = 16
SAME_STEP_S = 0.0005


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


def find_stalls(starts_unix: np.ndarray, over_s: np.ndarray) -> tuple[tuple[float, float], ...]:
    """Stalled steps, (start, seconds over the model) in time order, one per step (the prefills
    of one step give the same row each: starts within SAME_STEP_S are one)."""
    out: list[tuple[float, float]] = []
    for start, over in sorted(zip(starts_unix.tolist(), over_s.tolist())):
        if over <= 0 or not np.isfinite(start):
            continue
        if out and start - out[-1][0] <= SAME_STEP_S:
            out[-1] = (out[-1][0], max(out[-1][1], over))
        else:
            out.append((start, over))
    return tuple(out)


class StepModel(Protocol):
    def step_time(self, batch: Sequence[tuple[int, int]]) -> float: ...


class OnRunClock:
    """A step model with the run's drift and stalls, for one replay whose time 0 is `t0_unix`
    of the run and whose seconds are the run's divided by `scale`. Stateful (each stall is
    spent once): one per replay."""

    __slots__ = ("model", "drift", "stalls", "t0_unix", "scale", "_next")

    def __init__(
        self,
        model: StepModel,
        drift: Drift | None,
        t0_unix: float,
        scale: float = 1.0,
        stalls: tuple[tuple[float, float], ...] = (),
    ) -> None:
        self.model, self.drift, self.stalls = model, drift, stalls
        self.t0_unix, self.scale = t0_unix, scale
        self._next = 0  # the first stall not yet passed

    def step_time(self, batch: Sequence[tuple[int, int]]) -> float:
        return self.model.step_time(batch)

    def step_time_at(self, batch: Sequence[tuple[int, int]], t: float) -> float:
        start = self.t0_unix + t / self.scale
        step = self.model.step_time(batch) * (float(self.drift.at(start)) if self.drift else 1.0)
        end = start + step / self.scale
        extra = 0.0
        while self._next < len(self.stalls) and self.stalls[self._next][0] < end:
            at, over = self.stalls[self._next]
            extra += over if at >= start else 0.0  # one that began while the replay idled delays nothing
            self._next += 1
        return step + extra * self.scale
