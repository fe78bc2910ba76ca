"""A verdict's `check`: its change applied to the server, measured, and held against what its
replay predicted (advice.json, under each verdict).

    change     the flags applied (or why none could be)
    as_run     measured: the run the advice came from
    baseline   measured: the unchanged configuration run again (run-to-run noise, measured)
    predicted  the replay of the change (the miss-ratio curve's hit ratio for its verdict)
    measured   the rerun with the change
    error      predicted - measured, per metric (`measure.METRICS`)
    noise      |baseline - as_run|, per metric, at least NOISE_FLOOR
    confirmed  the measured effect (measured - as run) has the predicted direction on the
               verdict's deciding metric and is larger than that metric's noise
    status     confirmed | refuted | not applicable, and `reason`, a finding (code and text)
    misses     findings about each metric (`subject`) whose prediction is off by more than
               MISS_SHARE of the measured value (the prefix hit ratio, a share itself: by more
               than HIT_RATIO_MISS): by how much, and the likeliest cause (the code says
               which): within the run-to-run noise; a miss-ratio curve computed from a run
               under KV pressure (an upper bound: more blocks first admit more requests at
               once, and vLLM counts a preempted request's lookups apart while the events
               count its recomputed blocks as misses more blocks would avoid); the
               server stepping at another speed in the rerun than in the run the replay models
               (`speed`: the rerun's fitted step time over the run's, on the run's typical
               batch; a shared machine), only where the miss goes the way that speed moves
               the metric (a slower rerun cannot explain a TTFT below the prediction); else
               the replay's own model

The deciding metric is the one the verdict argues with: the miss-ratio curve's add_memory, the
prefix hit ratio (up); a verdict whose replay showed fewer preemptions by more than their
noise floor, preemptions (down); otherwise TTFT p99 (down). kv_not_bottleneck predicts no
gain: it is confirmed when TTFT p99 does not fall by more than the noise.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from harness.advisor.check_text import fmt
from harness.bundle.finding import Finding
from harness.verify.measure import METRICS

CheckStatus = Literal["confirmed", "refuted", "not applicable"]
NOISE_FLOOR = {
    "preemptions": 1.0,
    "ttft_p50_s": 0.005,
    "ttft_p99_s": 0.005,
    "output_tokens_per_s": 0.0,
    "prefix_hit_ratio": 0.005,
}
LOWER_IS_BETTER = {"preemptions", "ttft_p50_s", "ttft_p99_s"}
MISS_SHARE = 0.30
HIT_RATIO_MISS = 0.05  # 5 points of hit ratio
SPEED_SLACK = 0.15  # a rerun within 15% of the run's step speed: no speed change to blame
# Which way a slower server moves a metric against a replay at the run's speed: it can only
# explain a miss in that direction (the others have no sure direction).
SLOWER_MOVES = {"ttft_p50_s": 1, "ttft_p99_s": 1, "output_tokens_per_s": -1}
CURVE_METRIC = "prefix_hit_ratio"


@dataclass(frozen=True, slots=True)
class Check:
    change: dict[str, Any]
    status: CheckStatus
    reason: Finding
    as_run: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] = field(default_factory=dict)
    predicted: dict[str, Any] = field(default_factory=dict)
    measured: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] = field(default_factory=dict)
    noise: dict[str, Any] = field(default_factory=dict)
    decided_by: str | None = None
    confirmed: bool = False
    misses: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "reason": self.reason.to_dict()}

    @property
    def code(self) -> str:
        return self.reason.code


def not_applicable(change: dict[str, Any], reason: Finding) -> Check:
    return Check(change, "not applicable", reason)


def predicted_metrics(verdict: dict[str, Any]) -> dict[str, Any]:
    """What the verdict's replay predicts for the change (the curve's hit ratio for its verdict)."""
    changed = (verdict.get("replay") or {}).get("changed") or {}
    predicted = {m: changed.get(m) for m in METRICS}
    curve = verdict.get("projected", {}).get("hit_ratio")
    if verdict.get("action") == "add_memory" and curve is not None:
        predicted[CURVE_METRIC] = curve
    return predicted


def deciding_metric(verdict: dict[str, Any]) -> str:
    if verdict.get("action") == "add_memory" and verdict.get("projected", {}).get("hit_ratio") is not None:
        return CURVE_METRIC
    if verdict.get("action") == "kv_not_bottleneck":
        return "ttft_p99_s"
    replay = verdict.get("replay") or {}
    base, changed = replay.get("baseline") or {}, replay.get("changed") or {}
    # A drop no rerun could tell from noise (1 -> 0: the noise floor) cannot decide.
    if (base.get("preemptions") or 0) - (changed.get("preemptions") or 0) > NOISE_FLOOR["preemptions"]:
        return "preemptions"
    return "ttft_p99_s"


def _difference(a: Any, b: Any) -> float | None:
    return None if a is None or b is None else float(a) - float(b)


def _speed_explains(metric: str, predicted: float, measured: float, speed: float | None) -> bool:
    """Whether a rerun stepping at `speed` x the run's step time can explain this miss."""
    if speed is None or abs(speed - 1) <= SPEED_SLACK:
        return False
    way = SLOWER_MOVES.get(metric)
    return way is None or (measured - predicted) * way * (speed - 1) > 0


def _misses(
    predicted: dict[str, Any],
    measured: dict[str, Any],
    noise: dict[str, Any],
    speed: float | None,
    costs_steps: bool = False,
    curve_bound: bool = False,
) -> list[dict[str, Any]]:
    """`costs_steps`: the change itself may change the step time (a KV dtype: fp8 KV is
    converted on every read where the hardware has no fp8 arithmetic, as on CPU).
    `curve_bound`: the hit ratio predicted is the miss-ratio curve's, from a run under KV
    pressure, so only an upper bound."""
    out = []
    for m in METRICS:
        p, got = predicted.get(m), measured.get(m)
        band = HIT_RATIO_MISS if m == CURVE_METRIC else MISS_SHARE * abs(got or 0)
        if p is None or got is None or abs(p - got) <= band:
            continue
        if noise.get(m) is not None and abs(p - got) <= noise[m]:
            cause = Finding(
                "verify_miss_noise", "within the run-to-run noise measured by the unchanged rerun", m
            )
        elif m == CURVE_METRIC and curve_bound and p > got:
            cause = Finding(
                "verify_miss_curve_pressure",
                "the miss-ratio curve came from a run under KV pressure, where it is an upper bound: more "
                "blocks first admitted more requests at once, and a preempted request's recomputed blocks "
                "count as misses more blocks would avoid, while the server counts its lookups apart",
                m,
            )
        elif costs_steps and speed is not None and speed > 1 and _speed_explains(m, p, got, speed):
            cause = Finding(
                "verify_miss_change_speed",
                f"the server stepped x{speed:.2f} slower with the change: the new KV dtype costs step time "
                "on this server, and the replay steps at the run's speed",
                m,
            )
        elif speed is not None and _speed_explains(m, p, got, speed):
            way = f"x{speed:.2f} slower" if speed > 1 else f"x{1 / speed:.2f} faster"
            cause = Finding(
                "verify_miss_speed",
                f"the server stepped {way} in this rerun than in the run the replay models "
                "(a shared machine)",
                m,
            )
        else:
            cause = Finding("verify_miss_model", "the replay's model of the server", m)
        share = (p - got) / got if got else None
        found = cause.to_dict()
        out.append({**found, "predicted": p, "measured": got, "error_share": share})
    return out


def judge_check(
    verdict: dict[str, Any],
    change: dict[str, Any],
    as_run: dict[str, Any],
    baseline: dict[str, Any],
    measured: dict[str, Any],
    speed: float | None = None,
) -> Check:
    predicted = predicted_metrics(verdict)
    error = {m: _difference(predicted.get(m), measured.get(m)) for m in METRICS}
    noise = {
        m: None if (d := _difference(baseline.get(m), as_run.get(m))) is None else max(abs(d), NOISE_FLOOR[m])
        for m in METRICS
    }
    metric = deciding_metric(verdict)
    effect, band = _difference(measured.get(metric), as_run.get(metric)), noise[metric]
    parts = dict(as_run=as_run, baseline=baseline, predicted=predicted, measured=measured, error=error)
    misses = _misses(
        predicted,
        measured,
        noise,
        speed,
        costs_steps=verdict.get("action") == "quantize_kv_cache",
        curve_bound=bool(verdict.get("projected", {}).get("upper_bound")),
    )
    if effect is None or band is None:
        return Check(
            change, "not applicable", Finding("verify_not_measured", f"{metric} was not measured"), **parts
        )
    better = -effect if metric in LOWER_IS_BETTER else effect
    if verdict.get("action") == "kv_not_bottleneck":
        confirmed = better <= band
        what = (
            "more KV memory changed TTFT p99 by no more than the noise"
            if confirmed
            else "more KV memory helped"
        )
    else:
        confirmed = better > band
        what = f"{metric} {fmt(metric, as_run.get(metric))} -> {fmt(metric, measured.get(metric))} measured"
        what += f", predicted {fmt(metric, predicted.get(metric))}; noise ±{fmt(metric, band)}"
    status: CheckStatus = "confirmed" if confirmed else "refuted"
    return Check(
        change,
        status,
        Finding("verify_confirmed", what, metric) if confirmed else Finding("verify_refuted", what, metric),
        **parts,
        noise=noise,
        decided_by=metric,
        confirmed=confirmed,
        misses=misses,
    )
