"""The server side of a run over time, from the exporter's 1-second samples.

Invariants:
- Counters (prefix queries/hits, preemptions, tokens, finished requests) are turned into
  per-sample increases where a drop means the engine restarted: the increase is then the
  new value itself (as PromQL's `increase()`), so a rate is never negative.
- Ratios and rates come from counter *deltas* over a trailing window, never from the
  cumulative values: a cache that was hot before the run must not flatter this run.
- Down samples (`up` False) are kept out of every figure; an outage shows as a gap.
- With several engine instances, the exporter's aggregate (instance "all") is used when
  present; otherwise usage ratios are averaged and counts summed per sample time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from exporter.quantities import ALL, COUNTERS

# Instances of one model add up (the exporter's aggregate rule), counters and summed gauges alike.
GAUGES_SUMMED: tuple[str, ...] = tuple(q.name for q in ALL if q.kind == "gauge" and q.combine == "sum")
WINDOW_S = 10.0  # trailing window for hit ratio and rates: long enough to smooth 1-s scrapes
EDGE_SLACK_S = 2.0  # two 1-s scrapes: keeps one sample before the first send and one after the end


def clip_to_window(
    server: pd.DataFrame, bounds: tuple[float, float] | None, slack_s: float = EDGE_SLACK_S
) -> pd.DataFrame:
    """The samples of the measurement window (plus `slack_s` each side, so the counter
    increases that cover the window's edges are kept). The exporter also scrapes the engine's
    warm-up, the calibration probes and the drain; those must not dilute KV usage or count
    preemptions that no measured request could have seen."""
    if bounds is None or server.empty:
        return server
    t = server["time_unix"]
    return server[(t >= bounds[0] - slack_s) & (t <= bounds[1] + slack_s)]


def counter_increase(values: pd.Series) -> pd.Series:
    """Per-sample increase of a cumulative counter; 0 at the first known value, NaN where unknown."""
    v = pd.to_numeric(values, errors="coerce").astype(float)
    known = v.dropna()
    d = known.diff()
    d = d.where(d >= 0, known)  # a drop is a restart: everything since counts as new
    if len(d):
        d.iloc[0] = 0.0
    return d.reindex(v.index)


def select_series(server: pd.DataFrame) -> pd.DataFrame:
    """One row per sample time for the run's engine (see the module invariants)."""
    up = server[server["up"].astype(bool)] if len(server) else server
    if up.empty:
        return up
    if (up["instance"] == "all").any():
        return up[up["instance"] == "all"].reset_index(drop=True)
    keys = up[["model", "instance"]].drop_duplicates()
    if len(keys) <= 1:
        return up.reset_index(drop=True)
    agg: dict[str, Any] = {c: "sum" for c in COUNTERS + GAUGES_SUMMED if c in up.columns}
    agg.update(
        {"kv_usage_ratio": "mean", "kv_block_size_tokens": "first", "model": "first", "target": "first"}
    )
    out = up.groupby("time_unix", as_index=False).agg(agg)
    out["instance"] = "all"
    out["up"] = True
    return out


def timeline(server: pd.DataFrame, t0_unix: float | None = None, window_s: float = WINDOW_S) -> pd.DataFrame:
    """Per-sample server state: t_s (seconds from `t0_unix`, default the first sample),
    kv_usage_ratio, kv_capacity_tokens, requests_running/waiting, preemptions_delta,
    preemptions_per_s, prefix_hit_ratio (windowed), generation_tokens_per_s (windowed)."""
    s = select_series(server)
    state = (
        "kv_usage_ratio",
        "kv_capacity_tokens",
        "kv_capacity_blocks",
        "requests_running",
        "requests_waiting",
        "preemptions",
    )
    rates = ("preemptions_delta", "preemptions_per_s", "prefix_hit_ratio", "generation_tokens_per_s")
    if s.empty:
        return pd.DataFrame(columns=["time_unix", "t_s", *state, *rates])
    s = s.sort_values("time_unix").reset_index(drop=True)
    t0 = float(s["time_unix"].iloc[0]) if t0_unix is None else t0_unix
    out = pd.DataFrame({"time_unix": s["time_unix"], "t_s": s["time_unix"] - t0})
    for c in state:
        out[c] = pd.to_numeric(s[c], errors="coerce").astype(float)
    deltas = {c: counter_increase(s[c]).fillna(0.0) for c in COUNTERS}
    out["preemptions_delta"] = deltas["preemptions"]
    # A time-indexed rolling sum gives "increase over the trailing window" per sample.
    idx = pd.to_datetime(s["time_unix"], unit="s")
    roll = {
        c: pd.Series(d.to_numpy(), index=idx).rolling(f"{window_s}s").sum().to_numpy()
        for c, d in deltas.items()
    }
    # Each delta covers the interval since the previous sample, so the window's length is the
    # rolling sum of those intervals (not last minus first time, which misses one interval).
    dt = s["time_unix"].diff().fillna(0.0).to_numpy()
    span = pd.Series(dt, index=idx).rolling(f"{window_s}s").sum().to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        out["preemptions_per_s"] = np.where(span > 0, roll["preemptions"] / span, np.nan)
        out["generation_tokens_per_s"] = np.where(span > 0, roll["generation_tokens"] / span, np.nan)
        q, h = roll["prefix_cache_queries_tokens"], roll["prefix_cache_hits_tokens"]
        out["prefix_hit_ratio"] = np.where(q > 0, np.clip(h / np.where(q > 0, q, 1), 0.0, 1.0), np.nan)
    return out


@dataclass(frozen=True, slots=True)
class ServerSummary:
    samples: int
    duration_s: float | None
    model: str | None
    kv_capacity_tokens: float | None
    kv_capacity_blocks: float | None
    mean_kv_usage_ratio: float | None
    p95_kv_usage_ratio: float | None
    peak_kv_usage_ratio: float | None
    time_above_90pct_s: float | None  # seconds (sample count x interval) with KV usage >= 0.9
    prefix_hit_ratio: float | None  # hits / queries over the whole run, from counter increases
    preemptions: float | None  # increase over the run
    preemptions_per_s: float | None
    preemption_onset_unix: float | None  # first sample whose counter increased (see join.py)
    peak_requests_running: float | None
    peak_requests_waiting: float | None
    mean_requests_waiting: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _f(x: Any) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


def preemption_onset(tl: pd.DataFrame) -> float | None:
    """Unix time of the first sample whose preemption counter increased, None if it never did.

    The counter may already be above zero when the run starts (an engine reused across a
    sweep), which is why the onset is an *increase*, not a non-zero value.
    """
    hits = tl.loc[tl["preemptions_delta"] > 0, "time_unix"]
    return float(hits.iloc[0]) if len(hits) else None


def summarise_server(server: pd.DataFrame) -> ServerSummary:
    s = select_series(server)
    tl = timeline(server)
    if tl.empty:
        return ServerSummary(0, *([None] * 15))
    duration = float(tl["t_s"].iloc[-1])
    interval = duration / (len(tl) - 1) if len(tl) > 1 else None
    usage = tl["kv_usage_ratio"].dropna()
    q = counter_increase(s["prefix_cache_queries_tokens"]).sum(min_count=1)
    h = counter_increase(s["prefix_cache_hits_tokens"]).sum(min_count=1)
    pre = counter_increase(s["preemptions"]).sum(min_count=1) if s["preemptions"].notna().any() else np.nan
    models = s["model"].dropna()
    return ServerSummary(
        samples=len(tl),
        duration_s=duration,
        model=str(models.iloc[0]) if len(models) else None,
        kv_capacity_tokens=_f(tl["kv_capacity_tokens"].max()),
        kv_capacity_blocks=_f(tl["kv_capacity_blocks"].max()),
        mean_kv_usage_ratio=_f(usage.mean()) if len(usage) else None,
        p95_kv_usage_ratio=_f(np.percentile(usage, 95)) if len(usage) else None,
        peak_kv_usage_ratio=_f(usage.max()) if len(usage) else None,
        time_above_90pct_s=_f((usage >= 0.9).sum() * interval) if interval and len(usage) else None,
        prefix_hit_ratio=_f(min(1.0, h / q)) if np.isfinite(q) and q > 0 and np.isfinite(h) else None,
        preemptions=_f(pre),
        preemptions_per_s=_f(pre / duration) if duration > 0 and np.isfinite(pre) else None,
        preemption_onset_unix=preemption_onset(tl),
        peak_requests_running=_f(tl["requests_running"].max()),
        peak_requests_waiting=_f(tl["requests_waiting"].max()),
        mean_requests_waiting=_f(tl["requests_waiting"].mean()),
    )
