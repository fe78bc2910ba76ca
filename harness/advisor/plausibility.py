"""Is a replay's baseline a model of the run at all? A what-if replay can only be trusted to
verify a change when its "as run" replay resembles what the run measured: a baseline whose
TTFT p50 is 12 µs against a measured 300 ms replays some other deployment (the cost model of
a model or GPU the server is not, or the wrong pool), and whatever its changed replay shows
says nothing about this server.

The check compares the replay's TTFT p50 with the client's measured p50 over the completed
requests and calls the baseline implausible when they differ by more than a factor of
MAX_RATIO either way (loose: a cost model within a few times of reality still ranks changes
usefully; ten times off it does not). It is deliberately one small function, separate from
any calibration of the replay's time axis.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.advisor.whatif import ReplayMetrics
from harness.bundle.finding import Finding

MAX_RATIO = 10.0


def implausible(baseline: ReplayMetrics, completed: pd.DataFrame) -> Finding | None:
    """Why the baseline does not resemble the run, or None when it does (or cannot be told)."""
    column = completed["ttft_s"] if "ttft_s" in completed.columns else pd.Series(dtype=float)
    measured = pd.to_numeric(column, errors="coerce").dropna().to_numpy(float)
    measured = measured[np.isfinite(measured)]
    replayed = baseline.ttft_p50_s
    if not measured.size or replayed is None:
        return None
    p50 = float(np.median(measured))
    if p50 <= 0 or replayed <= 0:
        return Finding(
            "replay_implausible",
            f"the replay of the run as it was has a TTFT p50 of {replayed:.3g} s "
            f"against {p50:.3g} s measured",
        )
    ratio = replayed / p50
    if 1 / MAX_RATIO <= ratio <= MAX_RATIO:
        return None
    return Finding(
        "replay_implausible",
        f"the replay of the run as it was has a TTFT p50 of {_secs(replayed)} against {_secs(p50)} measured "
        f"(x{ratio:.3g}): it does not model this deployment, so no replay here verifies anything",
    )


def _secs(x: float) -> str:
    return f"{x * 1e6:.0f} µs" if x < 1e-3 else f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"
