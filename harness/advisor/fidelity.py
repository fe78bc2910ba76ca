"""Does the replay reproduce the run? The unchanged configuration's replay held against what
the run measured, before any what-if is allowed to verify anything.

Two figures decide, the ones the verdicts argue with: preemptions (the server's counter
over the run) and TTFT p99 (the server's own per-request TTFT where the bundle has it, as
the simulator models the server, else the client's). Each must be within TOLERANCE of the
measured value, or within an absolute slack where 25% of a small number is noise
(PREEMPTION_SLACK preemptions, TTFT_SLACK_S). A what-if whose baseline is within both is
"verified" when its replay shows the gain; otherwise its outcome is "indicative", with the
baseline's error as the reason: the replay points the way, but it does not reproduce this
run well enough to confirm by how much.

The prefix hit ratio is held apart, for the claims about it (more blocks for prefix reuse):
the replay's against the cached over prompt tokens of the completed requests the replay
carries (the server's counters also count requests outside the bundle's measured ones,
calibration probes), within HIT_RATIO_SLACK (absolute).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np
import pandas as pd

from harness.bundle.finding import Finding

TOLERANCE = 0.25
PREEMPTION_SLACK = 2.0
TTFT_SLACK_S = 0.010
HIT_RATIO_SLACK = 0.05
SERVER_TTFT_SHARE = 0.9  # use the server's TTFT when at least this share of requests has it

TtftSource = Literal["server", "client"]


@dataclass(frozen=True, slots=True)
class Measured:
    preemptions: float | None
    ttft_p99_s: float | None
    ttft_source: TtftSource
    hit_ratio: float | None = None  # cached over prompt tokens of the completed requests


@dataclass(frozen=True, slots=True)
class Fidelity:
    measured: Measured
    replayed_preemptions: int
    replayed_ttft_p99_s: float | None
    preemption_error: float | None  # (replayed - measured) / measured; None when measured is 0 or unknown
    ttft_error: float | None
    within: bool
    reason: Finding
    tolerance: float = TOLERANCE
    replayed_hit_ratio: float | None = None
    hit_ratio_within: bool | None = None  # None: no hit ratio measured or replayed

    def to_dict(self) -> dict:
        return {**asdict(self), "reason": self.reason.to_dict()}


def measured_run(done: pd.DataFrame, preemptions: float | None) -> Measured:
    """What the run measured, from its completed requests and the server's preemption count."""
    server = pd.to_numeric(done.get("server_ttft_s"), errors="coerce") if "server_ttft_s" in done else None
    if server is not None and len(done) and server.notna().mean() >= SERVER_TTFT_SHARE:
        values, source = server.dropna().to_numpy(float), "server"
    else:
        values, source = pd.to_numeric(done["ttft_s"], errors="coerce").dropna().to_numpy(float), "client"
    p99 = float(np.percentile(values, 99)) if values.size else None
    cached = pd.to_numeric(done.get("cached_tokens"), errors="coerce") if "cached_tokens" in done else None
    prompt = float(done["prompt_tokens"].sum()) if len(done) else 0.0
    hit = (
        float(cached.fillna(0).sum()) / prompt
        if cached is not None and cached.notna().any() and prompt
        else None
    )
    return Measured(preemptions, p99, source, hit)  # type: ignore[arg-type]


def _off(replayed: float | None, measured: float | None, slack: float) -> tuple[float | None, bool]:
    """(relative error, within tolerance)."""
    if measured is None or replayed is None:
        return None, False
    error = (replayed - measured) / measured if measured else None
    return error, abs(replayed - measured) <= max(TOLERANCE * measured, slack)


def judge_fidelity(
    measured: Measured, preemptions: int, ttft_p99_s: float | None, hit_ratio: float | None = None
) -> Fidelity:
    """The baseline replay (`preemptions`, `ttft_p99_s`, `hit_ratio`) against the run (see the
    module doc)."""
    p_err, p_ok = _off(float(preemptions), measured.preemptions, PREEMPTION_SLACK)
    t_err, t_ok = _off(ttft_p99_s, measured.ttft_p99_s, TTFT_SLACK_S)
    parts = []
    if not p_ok:
        parts.append(
            "the server's preemption count is unknown"
            if measured.preemptions is None
            else f"preemptions {preemptions} replayed against {measured.preemptions:.0f} measured"
        )
    if not t_ok:
        parts.append(
            "no TTFT to compare"
            if measured.ttft_p99_s is None or ttft_p99_s is None
            else f"TTFT p99 {ttft_p99_s:.3g} s replayed against {measured.ttft_p99_s:.3g} s measured "
            f"({measured.ttft_source})"
        )
    within = p_ok and t_ok
    reason = (
        Finding(
            "replay_within_tolerance",
            f"the unchanged configuration's replay is within {TOLERANCE:.0%} of the run "
            "on preemptions and TTFT p99",
        )
        if within
        else Finding("replay_off_run", "the unchanged configuration's replay is off: " + "; ".join(parts))
    )
    hit_ok = (
        None
        if measured.hit_ratio is None or hit_ratio is None
        else abs(hit_ratio - measured.hit_ratio) <= HIT_RATIO_SLACK
    )
    return Fidelity(
        measured, preemptions, ttft_p99_s, p_err, t_err, within, reason, TOLERANCE, hit_ratio, hit_ok
    )


def hit_ratio_off(fidelity: Fidelity | None) -> Finding | None:
    """Why the baseline's prefix hit ratio cannot back a claim about it (None: it can)."""
    if fidelity is None or fidelity.hit_ratio_within is not False:
        return None
    return Finding(
        "replay_hit_ratio_off",
        f"the unchanged configuration's replay hits {fidelity.replayed_hit_ratio:.1%} of prompt tokens, "
        f"the run {fidelity.measured.hit_ratio:.1%}: more than {HIT_RATIO_SLACK:.0%} apart",
    )
