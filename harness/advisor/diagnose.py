"""Diagnosis of one engine instance over a window of canonical samples: a finished run's
server.parquet, or a live exporter's /api/v1/samples.

The window rules (KV saturated, persistent preemption, waiting while KV usage is low) are
the exporter's (`exporter.diagnosis`), run unchanged so the live `kvscope_advice` metric
and the advisor agree. On top of them this module measures what those rules leave out:

- preemptions per finished request and per minute, graded by the reference's levels:
  none; occasional (< 1 % of requests or < 1 per minute: SGLang calls ~1/min "okay");
  warn (1-5 %); act (> 5 % of requests, or > 1 per second).
- the share of the time the cache is saturated (usage >= the exporter's 0.98), and the
  share in which requests wait while usage stays under its 0.8 "low" mark.

`kv_pressure` (the KV verdicts' trigger) is preemption at the "act" level, the exporter's
persistent-preemption rule, or requests queueing on the cache: waiting in at least a
quarter of the window while the free KV tokens are fewer than a new request needs to be
admitted (`admission_tokens`: a contiguous allocator's max_model_len reservation, or a
paged engine's typical first prompt chunk; without it, usage >= 0.98 stands in). Usage
alone misleads both ways: a full paged cache that queues nothing is doing its job, and a
contiguous pool at 70 % can be unable to take one more reservation.
`kv_not_bottleneck` (only without pressure) is the exporter's rule, or requests waiting
in at least half the window while usage stays low and nothing is preempted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from exporter.diagnosis import Diagnosis, Thresholds, diagnose
from exporter.dialects.sample import EngineSample
from exporter.quantities import QUANTITIES
from exporter.series import counter_values, hit_ratio, increase

Window = Sequence[tuple[float, EngineSample]]
WindowKey = tuple[str, str, str]  # (target, model, instance): one engine instance of one target
PreemptionLevel = Literal["none", "occasional", "warn", "act", "unknown"]
OCCASIONAL_PER_REQUEST, ACT_PER_REQUEST = 0.01, 0.05
OCCASIONAL_PER_MINUTE, ACT_PER_SECOND = 1.0, 1.0
QUEUEING_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class WindowDiagnosis:
    target: str
    model: str
    instance: str
    points: int
    duration_s: float
    preemptions: float | None
    finished: float | None
    preemptions_per_finished: float | None
    preemptions_per_minute: float | None
    preemption_level: PreemptionLevel
    saturated_share: float | None
    waiting_share: float | None
    waiting_low_usage_share: float | None
    waiting_kv_blocked_share: float | None  # waiting while the free KV could not admit one more
    max_usage: float | None
    mean_usage: float | None
    mean_running: float | None
    max_running: float | None
    hit_ratio: float | None
    kv_pressure: bool
    kv_not_bottleneck: bool
    exporter_advice: dict[str, bool] = field(default_factory=dict)
    exporter_reasons: dict[str, str] = field(default_factory=dict)

    def numbers(self) -> dict[str, Any]:
        """The numeric evidence, rounded for people, None where unknown."""
        keys = (
            "points",
            "duration_s",
            "preemptions",
            "finished",
            "preemptions_per_finished",
            "preemptions_per_minute",
            "saturated_share",
            "waiting_share",
            "waiting_low_usage_share",
            "waiting_kv_blocked_share",
            "max_usage",
            "mean_usage",
            "mean_running",
            "max_running",
            "hit_ratio",
        )
        return {k: _round(getattr(self, k)) for k in keys}


def _round(x: Any) -> Any:
    return round(x, 4) if isinstance(x, float) and math.isfinite(x) else x


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def preemption_level(per_finished: float | None, per_minute: float | None) -> PreemptionLevel:
    if per_finished is None and per_minute is None:
        return "unknown"
    pf, pm = per_finished or 0.0, per_minute or 0.0
    if pf == 0 and pm == 0:
        return "none"
    if pf > ACT_PER_REQUEST or pm > 60 * ACT_PER_SECOND:
        return "act"
    if pf < OCCASIONAL_PER_REQUEST or pm < OCCASIONAL_PER_MINUTE:
        return "occasional"
    return "warn"


def _kv_blocked(s: EngineSample, admission_tokens: int, th: Thresholds) -> bool:
    """Could the cache not admit one more request at this sample?"""
    u = s.kv_usage_ratio
    if u is None:
        return False
    capacity = s.kv_capacity_tokens or (s.kv_capacity_blocks or 0) * (s.kv_block_size_tokens or 0)
    if admission_tokens <= 0 or not capacity:
        return u >= th.saturated_usage
    return (1 - u) * capacity < admission_tokens


def diagnose_window(
    window: Window,
    target: str = "",
    finished_fallback: int | None = None,
    th: Thresholds | None = None,
    admission_tokens: int = 0,
) -> WindowDiagnosis:
    """Diagnose one instance's window (oldest first). `finished_fallback` is the number of
    completed requests from the client side, used when the engine has no finished counter;
    `admission_tokens` the free KV tokens a new request needs (0: unknown)."""
    th = th or Thresholds()
    exp: Diagnosis = diagnose(window, th)
    samples = [s for _, s in window]
    usage = [s.kv_usage_ratio for s in samples if s.kv_usage_ratio is not None]
    waiting = [
        (s.requests_waiting, s.kv_usage_ratio, _kv_blocked(s, admission_tokens, th))
        for s in samples
        if s.requests_waiting is not None
    ]
    running = [s.requests_running for s in samples if s.requests_running is not None]
    duration = window[-1][0] - window[0][0] if len(window) >= 2 else 0.0
    pre = increase(counter_values(window, "preemptions"))
    finished = increase(counter_values(window, "requests_finished"))
    if not finished and finished_fallback:
        finished = float(finished_fallback)
    per_finished = pre / finished if pre is not None and finished else None
    per_minute = pre / duration * 60 if pre is not None and duration > 0 else None
    level = preemption_level(per_finished, per_minute)
    saturated = _share([u >= th.saturated_usage for u in usage])
    waiting_share = _share([w > 0 for w, _, _ in waiting])
    waiting_low = _share([w > 0 and u is not None and u < th.low_usage and not b for w, u, b in waiting])
    waiting_blocked = _share([w > 0 and b for w, _, b in waiting])
    persistent = (
        exp.evidence is not None
        and exp.evidence.preempting_fraction is not None
        and exp.evidence.preempting_fraction > th.preemption_fraction
    )
    queueing_on_kv = (waiting_blocked or 0) >= QUEUEING_SHARE
    pressure = level == "act" or persistent or queueing_on_kv
    not_bottleneck = not pressure and (
        exp.advice.get("kv_not_bottleneck", False)
        or (
            (waiting_share or 0) >= th.waiting_fraction
            and usage != []
            and max(usage) < th.low_usage
            and level in ("none", "occasional")
        )
    )
    first = samples[0] if samples else EngineSample(model="", instance="")
    return WindowDiagnosis(
        target=target,
        model=first.model,
        instance=first.instance,
        points=len(window),
        duration_s=duration,
        preemptions=pre,
        finished=finished,
        preemptions_per_finished=per_finished,
        preemptions_per_minute=per_minute,
        preemption_level=level,
        saturated_share=saturated,
        waiting_share=waiting_share,
        waiting_low_usage_share=waiting_low,
        waiting_kv_blocked_share=waiting_blocked,
        max_usage=max(usage) if usage else None,
        mean_usage=_mean(usage),
        mean_running=_mean(running),
        max_running=max(running) if running else None,
        hit_ratio=hit_ratio(window),
        kv_pressure=pressure,
        kv_not_bottleneck=not_bottleneck,
        exporter_advice=dict(exp.advice),
        exporter_reasons=dict(exp.reasons),
    )


def windows_from_server_frame(
    server: Any, kv_cache_dtype: str | None = None, gpu_memory_utilization: float | None = None
) -> dict[WindowKey, list]:
    """server.parquet rows -> {(target, model, instance): [(t, EngineSample), ...]}, up rows only.
    A row's own kv_cache_dtype / gpu_memory_utilization (from cache_config_info) win; the
    run's configuration fills them in where the engine does not report them."""
    import pandas as pd

    out: dict[WindowKey, list] = {}
    if server.empty:
        return out
    frame = server[server["up"].fillna(True).astype(bool)] if "up" in server.columns else server
    for row in frame.to_dict("records"):
        values = {}
        for q in QUANTITIES:
            v = row.get(q)
            values[q] = (
                None if v is None or (isinstance(v, float) and math.isnan(v)) or pd.isna(v) else float(v)
            )
        key = (str(row.get("target") or ""), str(row.get("model") or ""), str(row.get("instance") or ""))
        dtype, gmu = row.get("kv_cache_dtype"), row.get("gpu_memory_utilization")
        sample = EngineSample(
            model=key[1],
            instance=key[2],
            kv_cache_dtype=dtype if isinstance(dtype, str) and dtype else kv_cache_dtype,
            gpu_memory_utilization=gmu if isinstance(gmu, float) and gmu == gmu else gpu_memory_utilization,
            **values,
        )
        out.setdefault(key, []).append((float(row["time_unix"]), sample))
    return out


def windows_from_samples_api(payload: dict[str, Any]) -> dict[WindowKey, list]:
    """The exporter's /api/v1/samples JSON -> windows keyed like `windows_from_server_frame`."""
    out: dict[WindowKey, list] = {}
    for target in payload.get("targets") or []:
        name = str(target.get("target") or "")
        for point in target.get("samples") or []:
            if not point.get("up", True):
                continue
            for inst in point.get("instances") or []:
                sample = EngineSample.from_dict(inst)
                out.setdefault((name, sample.model, sample.instance), []).append((float(point["t"]), sample))
    return out


def main_window(windows: dict[WindowKey, list]) -> tuple[WindowKey, list] | None:
    """The instance with the most samples (an aggregate "all" instance wins ties)."""
    if not windows:
        return None
    return max(windows.items(), key=lambda kv: (len(kv[1]), kv[0][2] == "all"))
