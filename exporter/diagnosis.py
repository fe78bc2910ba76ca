"""Diagnosis rules over a window of canonical samples: is the KV cache the bottleneck?

Pure functions: the exporter runs them live on each target's recent window (published as
`kvscope_advice`), and the harness runs the very same functions on a finished run's
recorded samples (`EngineSample.from_dict`). No clock, no I/O, no state.

Rules (thresholds in `Thresholds`):
- KV saturated: usage >= `saturated_usage` in at least `saturated_fraction` of the points.
- Persistent preemption: the preemption counter grew in more than `preemption_fraction` of
  the scrape intervals (a counter drop is a restart, and counts only if the new value > 0).
- Either one is KV pressure, which advises `add_memory`; plus `quantize_kv_cache` unless the
  KV cache is already 8-bit or narrower; `raise_memory_utilization` when the engine reports a
  memory utilisation below `memory_utilization_ceiling`; `cut_context` when a handful of
  requests (mean running <= `few_requests`) fill the cache, i.e. long contexts dominate.
- Requests waiting in at least `waiting_fraction` of the points while KV usage never reached
  `low_usage` and there is no KV pressure: `kv_not_bottleneck` (look at compute, batch
  limits such as max_num_seqs, or the scheduler's token budget instead).
- `make_prefix_identical` needs workload evidence the exporter does not have: the share of
  prompt tokens that *could* hit the cache if shared prefixes were byte-identical. The
  harness passes it as `expected_hit_ratio`; the rule fires when the observed windowed hit
  ratio is below `prefix_gap` times that. Live, it stays 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.dialects.sample import EngineSample
from exporter.series import hit_ratio, preemption_rate

ACTIONS: tuple[str, ...] = (
    "quantize_kv_cache",
    "cut_context",
    "add_memory",
    "raise_memory_utilization",
    "make_prefix_identical",
    "kv_not_bottleneck",
)
QUANTIZED_MARKERS = ("fp8", "int8", "int4", "fp4", "nvfp4", "e4m3", "e5m2")


@dataclass(frozen=True, slots=True)
class Thresholds:
    saturated_usage: float = 0.98
    saturated_fraction: float = 0.5
    preemption_fraction: float = 0.5
    low_usage: float = 0.8
    waiting_fraction: float = 0.5
    memory_utilization_ceiling: float = 0.9
    few_requests: float = 4.0
    prefix_gap: float = 0.5
    min_points: int = 3


@dataclass(frozen=True, slots=True)
class Evidence:
    points: int
    saturated_fraction: float | None
    preempting_fraction: float | None
    preemption_rate: float | None
    waiting_fraction: float | None
    max_usage: float | None
    mean_running: float | None
    hit_ratio: float | None
    kv_cache_dtype: str | None
    gpu_memory_utilization: float | None


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """`advice[action]` for every action in ACTIONS; `reasons` only for advised ones."""

    advice: dict[str, bool]
    reasons: dict[str, str] = field(default_factory=dict)
    evidence: Evidence | None = None


def _fraction(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def gather(window: Sequence[tuple[float, EngineSample]], th: Thresholds | None = None) -> Evidence:
    """Summary statistics of a window (oldest first) that the rules read."""
    th = th or Thresholds()
    usage = [s.kv_usage_ratio for _, s in window if s.kv_usage_ratio is not None]
    waiting = [s.requests_waiting for _, s in window if s.requests_waiting is not None]
    running = [s.requests_running for _, s in window if s.requests_running is not None]
    pre = [s.preemptions for _, s in window]
    steps = [b > a or (b < a and b > 0) for a, b in zip(pre, pre[1:]) if a is not None and b is not None]
    last = window[-1][1] if window else None
    return Evidence(
        points=len(window),
        saturated_fraction=_fraction([u >= th.saturated_usage for u in usage]),
        preempting_fraction=_fraction(steps),
        preemption_rate=preemption_rate(window),
        waiting_fraction=_fraction([w > 0 for w in waiting]),
        max_usage=max(usage) if usage else None,
        mean_running=sum(running) / len(running) if running else None,
        hit_ratio=hit_ratio(window),
        kv_cache_dtype=last.kv_cache_dtype if last else None,
        gpu_memory_utilization=last.gpu_memory_utilization if last else None,
    )


def diagnose(
    window: Sequence[tuple[float, EngineSample]],
    th: Thresholds | None = None,
    expected_hit_ratio: float | None = None,
) -> Diagnosis:
    """Advice for one engine instance from its window of samples (oldest first)."""
    th = th or Thresholds()
    ev = gather(window, th)
    advice = dict.fromkeys(ACTIONS, False)
    reasons: dict[str, str] = {}
    if ev.points < th.min_points:
        return Diagnosis(advice, reasons, ev)
    sat = ev.saturated_fraction
    saturated = sat is not None and sat >= th.saturated_fraction
    preempting = ev.preempting_fraction is not None and ev.preempting_fraction > th.preemption_fraction
    why = []
    if saturated:
        why.append(f"KV usage >= {th.saturated_usage:g} in {sat:.0%} of the window")
    if preempting:
        why.append(
            f"preemptions in {ev.preempting_fraction:.0%} of scrape intervals "
            f"({(ev.preemption_rate or 0):.3g}/s)"
        )
    if why:
        pressure = "; ".join(why)
        advice["add_memory"] = True
        reasons["add_memory"] = f"{pressure}: more KV memory (GPUs, or a larger GPU) raises capacity"
        dtype = (ev.kv_cache_dtype or "").lower()
        if not any(m in dtype for m in QUANTIZED_MARKERS):
            advice["quantize_kv_cache"] = True
            reasons["quantize_kv_cache"] = (
                f"{pressure}: an 8-bit KV cache (fp8/int8) about doubles "
                f"the tokens that fit (now {ev.kv_cache_dtype or 'unknown dtype'})"
            )
        gmu = ev.gpu_memory_utilization
        if gmu is not None and gmu < th.memory_utilization_ceiling:
            advice["raise_memory_utilization"] = True
            reasons["raise_memory_utilization"] = (
                f"{pressure}: gpu_memory_utilization is {gmu:g}; raising it gives the KV cache more blocks"
            )
        if ev.mean_running is not None and ev.mean_running <= th.few_requests:
            advice["cut_context"] = True
            reasons["cut_context"] = (
                f"{pressure} with only {ev.mean_running:.1f} requests running on "
                "average: a few long contexts fill the cache; lower max_model_len"
            )
    elif (
        ev.waiting_fraction is not None
        and ev.waiting_fraction >= th.waiting_fraction
        and ev.max_usage is not None
        and ev.max_usage < th.low_usage
    ):
        advice["kv_not_bottleneck"] = True
        reasons["kv_not_bottleneck"] = (
            f"requests waiting in {ev.waiting_fraction:.0%} of the window while KV "
            f"usage peaked at {ev.max_usage:.2f}: the limit is elsewhere "
            "(max_num_seqs, token budget, compute)"
        )
    if (
        expected_hit_ratio is not None
        and ev.hit_ratio is not None
        and ev.hit_ratio < th.prefix_gap * expected_hit_ratio
    ):
        advice["make_prefix_identical"] = True
        reasons["make_prefix_identical"] = (
            f"prefix hit ratio {ev.hit_ratio:.2f} vs {expected_hit_ratio:.2f} "
            "possible: shared prefixes are not byte-identical"
        )
    return Diagnosis(advice, reasons, ev)
