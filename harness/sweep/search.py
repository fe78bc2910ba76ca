"""`kvscope sweep --find-max`: which load to run next, from the points measured so far, to find
the highest load whose SLO attainment holds in as few points as it can.

Bracket, then bisect (as GuideLLM's and inference-perf's searches do):

1. The range's top first (`--rates LOW,HIGH`, `--concurrency LOW,HIGH`). If it meets the SLOs
   the search ends there: the maximum is above the range.
2. A failing top in open loop says how much the server can do: its achieved request rate c.
   Above c a queue builds at (r - c) requests a second, and the request arriving at t of a
   d-second point waits about (r - c) t / c; the last (1 - attainment) of the requests keep
   their TTFT within the SLO S while r <= c (1 + S / (attainment x d)). The bracket starts at
   that rate (without a TTFT SLO at c; without an achieved rate halfway, geometrically,
   between LOW and HIGH) and steps by (1 + tolerance) away from each result, the step
   squaring each time it does not yet bracket (1.1, 1.21, 1.46, ...), until one load meets
   the SLOs and a higher one does not. Below LOW with nothing met, the search ends: no load
   in the range meets them.
3. Then bisection, geometric for rates and on whole users for concurrency, until the bracket
   is within the tolerance (rates: high / low <= 1 + tolerance; concurrency: adjacent users)
   or `max_points` points have run. A bracket wider than (1 + tolerance)^2 is cut where the
   line through its ends' attainments (in log load) crosses the target, kept to its middle
   half so that it always shrinks; a narrower one at its geometric middle, which ends it.

A point that meets the SLOs has attainment >= the target and was not stopped early; the
answer is the highest such load, the boundary the bracket around it. Points are never
rerun by the search: repeats of the boundary points (for the spread) are the caller's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

DEFAULT_TOLERANCE = 0.1
DEFAULT_MAX_POINTS = 8
DEFAULT_REPEATS = 1  # extra runs of each boundary load (the caller's, for the spread)
ROUNDING = 1e-3  # rates run at 4 significant digits: a bracket may exceed the tolerance by that
INTERPOLATION_CLAMP = 0.25  # the next load stays within the bracket's middle half (in log load)


@dataclass(frozen=True, slots=True)
class SearchSettings:
    mode: str  # "rate" | "concurrency"
    low: float
    high: float
    attainment: float
    tolerance: float = DEFAULT_TOLERANCE
    max_points: int = DEFAULT_MAX_POINTS
    ttft_slo_s: float | None = None
    duration_s: float | None = None  # of each point: how long a queue may build


@dataclass(frozen=True, slots=True)
class Outcome:
    """One measured point: `met` is attainment >= the target and not stopped early."""

    load: float
    attainment: float | None
    met: bool
    achieved_requests_per_s: float | None = None
    stopped_early: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Boundary:
    """The search's answer: the highest load met (None: none), the lowest failing load above
    it (None: the top of the range met), and why the search ended."""

    best: float | None
    first_failing: float | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _round(s: SearchSettings, load: float) -> float:
    if s.mode == "concurrency":
        return float(max(1, round(load)))
    return float(f"{load:.4g}")


def bracket(done: Sequence[Outcome]) -> tuple[Outcome | None, Outcome | None]:
    """(highest load met, lowest failing load above it)."""
    met = [o for o in done if o.met]
    lo = max(met, key=lambda o: o.load) if met else None
    above = [o for o in done if not o.met and (lo is None or o.load > lo.load)]
    hi = min(above, key=lambda o: o.load) if above else None
    return lo, hi


def narrow_enough(s: SearchSettings, lo: float, hi: float) -> bool:
    if s.mode == "concurrency":
        return hi - lo <= 1
    return hi / lo <= (1 + s.tolerance) * (1 + ROUNDING)


def _interpolate(s: SearchSettings, lo: Outcome, hi: Outcome) -> float:
    """Within (1 + tolerance)^2 the geometric middle ends the search in one point; a wider
    bracket is cut where the attainments' line crosses the target, within its middle half."""
    a, b = math.log(lo.load), math.log(hi.load)
    if b - a <= 2 * math.log(1 + s.tolerance) + math.log(1 + ROUNDING):
        return math.exp((a + b) / 2)
    fa = (lo.attainment if lo.attainment is not None else 1.0) - s.attainment
    fb = (0.0 if hi.stopped_early or hi.attainment is None else hi.attainment) - s.attainment
    share = fa / (fa - fb) if fa - fb > 0 else 0.5
    share = min(max(share, INTERPOLATION_CLAMP), 1 - INTERPOLATION_CLAMP)
    return math.exp(a + share * (b - a))


def _step(s: SearchSettings, done: Sequence[Outcome]) -> float:
    """The step factor while bracketing: 1 + tolerance, squared for each step taken."""
    taken = max(len(done) - 2, 0)  # the top and the first guess take no step
    return (1 + s.tolerance) ** (2**taken)


def _guess(s: SearchSettings, top: Outcome) -> float:
    """Where bracketing starts after a failing top (see the module doc, step 2)."""
    achieved = top.achieved_requests_per_s
    if s.mode != "rate" or not achieved or not s.low <= achieved < top.load:
        return math.sqrt(s.low * s.high)
    if s.ttft_slo_s and s.duration_s:
        return min(achieved * (1 + s.ttft_slo_s / (s.attainment * s.duration_s)), top.load)
    return achieved


def next_load(s: SearchSettings, done: Sequence[Outcome]) -> float | None:
    """The next load to run, or None when the search is over (see `boundary` for why)."""
    if not done:
        return _round(s, s.high)
    lo, hi = bracket(done)
    tried = {o.load for o in done}
    if len(done) >= s.max_points or (lo is not None and hi is None):
        return None  # out of points, or the top of the range met the SLOs
    if lo is None:  # bracketing downwards
        if min(tried) <= s.low:
            return None  # nothing met down to the bottom of the range
        below = _guess(s, done[0]) if len(done) == 1 else min(tried) / _step(s, done)
        candidate = _round(s, max(below, s.low))
    elif narrow_enough(s, lo.load, hi.load):  # type: ignore[union-attr]
        return None
    elif hi is done[0] and lo.load * _step(s, done) < hi.load:  # type: ignore[union-attr]
        candidate = _round(s, lo.load * _step(s, done))  # bracketing upwards, under the range's top
    else:
        candidate = _round(s, _interpolate(s, lo, hi))  # type: ignore[arg-type]
    if candidate in tried and lo is not None and hi is not None:
        candidate = _round(s, math.sqrt(lo.load * hi.load))
    return None if candidate in tried else candidate


def boundary(s: SearchSettings, done: Sequence[Outcome]) -> Boundary:
    lo, hi = bracket(done)
    if lo is None:
        return Boundary(None, hi.load if hi else None, f"no load down to {s.low:g} met the SLOs")
    if hi is None:
        return Boundary(lo.load, None, f"the top of the range ({lo.load:g}) met the SLOs: search higher")
    if narrow_enough(s, lo.load, hi.load):
        why = "adjacent user counts" if s.mode == "concurrency" else f"within {s.tolerance:.0%}"
        return Boundary(lo.load, hi.load, f"bracketed {why}: {lo.load:g} met the SLOs, {hi.load:g} did not")
    return Boundary(
        lo.load, hi.load, f"stopped after {len(done)} points: {lo.load:g} met the SLOs, {hi.load:g} did not"
    )
