"""The knee of a throughput-latency curve, and the highest load that meets the SLOs.

Knee. Points are ordered by offered load (rate or concurrency). For each step from one point
to the next, the latency elasticity is e = Δln(latency p99) / Δln(throughput): the relative
latency cost of each relative unit of throughput gained. Little's law (load = throughput x
latency) splits every relative increase in load into a throughput part and a latency part;
e = 1 is the point where they are equal. The knee is the last point before the first step
with e > 1, i.e. after which more of each extra unit of load turns into waiting than into
work. A step whose throughput does not grow (< 1 %) while latency does counts as e = inf.
Latency increases below `MIN_LATENCY_STEP_S` are treated as noise (a p99 going from 8 to
20 ms is a large ratio of nothing). When no step crosses, there is no knee in the tested
range: the curve is still on its linear part and the sweep should go higher.

SLOs. A point meets them when at least `attainment` of its requests (failed ones count as
misses) met every SLO; the default 0.9 is the usual SLO-attainment target in the serving
literature (DistServe), and per-request attainment is robust with the few dozen requests a
short sweep point has, where a p99 is one or two requests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

KNEE_ELASTICITY = 1.0
MIN_THROUGHPUT_GAIN = 0.01  # in ln units: ~1 %
MIN_LATENCY_STEP_S = 0.050
DEFAULT_ATTAINMENT = 0.9


@dataclass(frozen=True, slots=True)
class Knee:
    index: int | None  # into the ordered points; None: not reached in the tested range
    elasticities: list[float | None] = field(default_factory=list)  # one per step (None: undefined)
    explanation: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def elasticity(x0: float, x1: float, y0: float, y1: float) -> float | None:
    """Δln y / Δln x for one step; inf when x stalls while y rises; None when undefined."""
    if not all(v is not None and math.isfinite(v) and v > 0 for v in (x0, x1, y0, y1)):
        return None
    dy = math.log(y1 / y0)
    if y1 - y0 < MIN_LATENCY_STEP_S:
        dy = min(dy, 0.0)  # latency noise: as if it had not grown
    dx = math.log(x1 / x0)
    if dx < MIN_THROUGHPUT_GAIN:
        return math.inf if dy > 0 else 0.0
    return dy / dx


def find_knee(
    throughput: Sequence[float],
    latency_p99: Sequence[float],
    loads: Sequence[Any] | None = None,
    threshold: float = KNEE_ELASTICITY,
) -> Knee:
    """See the module docstring. `loads` only label the explanation."""
    n = len(throughput)
    labels = [str(v) for v in loads] if loads is not None else [str(i) for i in range(n)]
    if n < 2:
        return Knee(None, [], "a knee needs at least two points")
    es = [
        elasticity(throughput[i], throughput[i + 1], latency_p99[i], latency_p99[i + 1]) for i in range(n - 1)
    ]
    for i, e in enumerate(es):
        if e is not None and e > threshold:
            cost = (
                "throughput stopped growing while latency rose"
                if math.isinf(e)
                else (f"latency p99 grew {e:.1f}x as fast as throughput (elasticity > {threshold:g})")
            )
            return Knee(i, es, f"knee at load {labels[i]}: from {labels[i]} to {labels[i + 1]}, {cost}")
    return Knee(
        None,
        es,
        f"no knee up to load {labels[-1]}: latency never grew faster than throughput; "
        "the sweep did not reach saturation",
    )


def highest_meeting(attainments: Sequence[float | None], target: float = DEFAULT_ATTAINMENT) -> int | None:
    """Index of the highest-load point whose SLO attainment is at least `target`, or None."""
    best = None
    for i, a in enumerate(attainments):
        if a is not None and math.isfinite(a) and a >= target:
            best = i
    return best
