"""Headline figures of a run (summary.json), from the requests and server frames.

Conventions: only `phase == "measure"` requests count (calibration probes are excluded);
throughput divides by the measurement window (first send to last completion), not by the
configured duration, so a run cut short by Ctrl-C still reports true rates; latency
percentiles are over successful requests; server figures are deltas of the exporter's
counters over the run (max - min, robust to a counter that started before the run) and
None when the server does not report them — never 0 for "unknown".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

PERCENTILES = (50, 90, 99)


def _stats(values: Any) -> dict[str, float | None]:
    arr = np.asarray(pd.Series(values, dtype="float64").dropna())
    if arr.size == 0:
        return {"count": 0, "mean": None, **{f"p{p}": None for p in PERCENTILES}, "max": None}
    out: dict[str, float | None] = {"count": int(arr.size), "mean": float(arr.mean())}
    out.update({f"p{p}": float(np.percentile(arr, p)) for p in PERCENTILES})
    out["max"] = float(arr.max())
    return out


def _delta(series: pd.Series) -> float | None:
    s = series.dropna() if series is not None else pd.Series(dtype="float64")
    return float(s.max() - s.min()) if len(s) else None


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df.columns else pd.Series(dtype="float64")


def request_summary(df: pd.DataFrame) -> dict[str, Any]:
    m = df[df["phase"] == "measure"] if "phase" in df.columns else df
    ok = m[m["ok"].astype(bool)] if len(m) else m
    out: dict[str, Any] = {
        "requests": int(len(m)), "ok": int(len(ok)), "failed": int(len(m) - len(ok)),
        "errors_by_class": {str(k): int(v) for k, v in m.loc[~m["ok"].astype(bool), "error_class"].value_counts().items()}
        if len(m) else {},
        "calibration_requests": int((df["phase"] == "calibration").sum()) if "phase" in df.columns else 0,
        "duplicate_request_ids": int(df["request_id"].duplicated().sum()) if len(df) else 0,
    }
    if len(m):
        start = float(m["send_time_unix"].min())
        end = float((m["send_time_unix"] + m["e2e_s"].fillna(0.0)).max())
        window = max(end - start, 1e-9)
    else:
        start = end = math.nan
        window = math.nan
    out["window_s"] = None if window != window else window
    out["req_per_s"] = len(ok) / window if len(ok) else 0.0
    out["output_tokens"] = int(ok["output_tokens"].fillna(0).sum()) if len(ok) else 0
    out["output_tok_per_s"] = out["output_tokens"] / window if len(ok) else 0.0
    itl = [g for gaps in ok["itl_s"] for g in (gaps if gaps is not None else ())] if len(ok) else []
    out["ttft_s"] = _stats(_col(ok, "ttft_s"))
    out["itl_s"] = _stats(itl)
    out["e2e_s"] = _stats(_col(ok, "e2e_s"))
    if len(ok):
        decode_tokens = (ok["output_tokens"] / ok["n"].clip(lower=1) - 1).where(lambda s: s > 0)
        out["tpot_s"] = _stats((ok["e2e_s"] - ok["ttft_s"]) / decode_tokens)
        out["client_overhead_ttft_s"] = _stats(ok["ttft_s"] - ok["server_ttft_s"])
    else:
        out["tpot_s"] = _stats([])
        out["client_overhead_ttft_s"] = _stats([])
    out["schedule_lag_s"] = _stats(_col(m, "schedule_lag_s"))
    target = _col(ok, "target_prompt_tokens").astype("float64")
    achieved = _col(ok, "prompt_tokens").astype("float64")
    out["prompt_tokens"] = {"target_mean": _stats(target)["mean"], "achieved_mean": _stats(achieved)["mean"],
                            "achieved_over_target_p50": _stats(achieved / target)["p50"]}
    out["output_tokens_vs_target"] = {
        "target_mean": _stats(_col(ok, "target_output_tokens").astype("float64"))["mean"],
        "achieved_mean": _stats((_col(ok, "output_tokens") / _col(ok, "n").clip(lower=1)).astype("float64"))["mean"]}
    cached, prompt = _col(ok, "cached_tokens").fillna(0).sum(), _col(ok, "prompt_tokens").fillna(0).sum()
    out["client_cached_prompt_ratio"] = float(cached / prompt) if prompt else None
    out["usage_source"] = {str(k): int(v) for k, v in _col(m, "usage_source").value_counts().items()}
    out["server_preemptions_seen_by_requests"] = int(_col(ok, "server_num_preemptions").fillna(0).sum()) if len(ok) else 0
    return out


def server_summary(df: pd.DataFrame) -> dict[str, Any]:
    up = df[df["up"].astype(bool)] if len(df) and "up" in df.columns else df.iloc[0:0]
    if not len(up):
        return {"samples": int(len(df)), "up_samples": 0}
    queries, hits = _delta(_col(up, "prefix_cache_queries_tokens")), _delta(_col(up, "prefix_cache_hits_tokens"))
    usage = _col(up, "kv_usage_ratio").dropna()
    return {
        "samples": int(len(df)), "up_samples": int(len(up)),
        "peak_kv_usage_ratio": float(usage.max()) if len(usage) else None,
        "mean_kv_usage_ratio": float(usage.mean()) if len(usage) else None,
        "kv_capacity_tokens": float(_col(up, "kv_capacity_tokens").dropna().max()) if _col(up, "kv_capacity_tokens").notna().any() else None,
        "preemptions": _delta(_col(up, "preemptions")),
        "prefix_cache_queries_tokens": queries, "prefix_cache_hits_tokens": hits,
        "prefix_hit_ratio": (hits / queries) if queries and hits is not None else None,
        "requests_finished": _delta(_col(up, "requests_finished")),
        "peak_requests_running": float(_col(up, "requests_running").max()) if _col(up, "requests_running").notna().any() else None,
        "peak_requests_waiting": float(_col(up, "requests_waiting").max()) if _col(up, "requests_waiting").notna().any() else None,
    }


def summarise(requests: pd.DataFrame, server: pd.DataFrame) -> dict[str, Any]:
    """`headline` is the short list people quote; `client` and `server` have the detail."""
    client, srv = request_summary(requests), server_summary(server)
    headline = {
        "requests_ok": client["ok"], "requests_failed": client["failed"], "errors_by_class": client["errors_by_class"],
        "req_per_s": client["req_per_s"], "output_tok_per_s": client["output_tok_per_s"],
        **{f"{m}_{p}_s": client[f"{m}_s"][p] for m in ("ttft", "itl", "e2e") for p in ("p50", "p99")},
        "peak_kv_usage_ratio": srv.get("peak_kv_usage_ratio"), "preemptions": srv.get("preemptions"),
        "prefix_hit_ratio": srv.get("prefix_hit_ratio"),
    }
    return {"headline": headline, "client": client, "server": srv}
