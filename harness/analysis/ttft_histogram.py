"""The server's TTFT histogram over a run, and Prometheus-style quantiles of it: what the
self-check compares the client's TTFT with when the server gives no per-request timings."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

TTFT_HISTOGRAM = "time_to_first_token_seconds"


def histogram_quantile(bounds: np.ndarray, counts: np.ndarray, q: float, upper: bool = False) -> float | None:
    """Prometheus-style quantile of a cumulative histogram (linear within the bucket), or the
    bucket's upper edge with `upper`. None when empty or when the quantile is in the +Inf bucket."""
    total = counts[-1] if len(counts) else 0
    if total <= 0:
        return None
    rank = q * total
    i = min(int(np.searchsorted(counts, rank, side="left")), len(bounds) - 1)
    if not np.isfinite(bounds[i]):
        return None
    if upper:
        return float(bounds[i])
    lo_b = bounds[i - 1] if i > 0 else 0.0
    lo_c = counts[i - 1] if i > 0 else 0.0
    width = counts[i] - lo_c
    return float(lo_b + (bounds[i] - lo_b) * ((rank - lo_c) / width if width > 0 else 1.0))


def _histograms(cell: Any) -> dict[str, Any]:
    if isinstance(cell, str):
        try:
            cell = json.loads(cell)
        except ValueError:
            return {}
    return cell if isinstance(cell, dict) else {}


def ttft_histogram_increase(server: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """(bounds, cumulative counts) of the server's TTFT histogram over the run: last sample
    minus first (the last alone if the engine restarted, i.e. counts went down). Reads the
    bundle's `histograms_json` column (or `histograms`, as the exporter records it)."""
    col = next((c for c in ("histograms_json", "histograms") if c in server.columns), None)
    if col is None:
        return None
    up = server[server["up"].astype(bool)] if "up" in server.columns else server
    rows = [h.get(TTFT_HISTOGRAM) for h in map(_histograms, up[col])]
    rows = [r for r in rows if isinstance(r, dict) and r.get("bounds")]
    if not rows:
        return None
    first, last = rows[0], rows[-1]
    bounds = np.array([np.inf if str(b).lower() in ("+inf", "inf") else float(b) for b in last["bounds"]])
    c_last, c_first = np.asarray(last["counts"], dtype=float), np.asarray(first["counts"], dtype=float)
    counts = c_last - c_first if c_first.shape == c_last.shape and (c_last >= c_first).all() else c_last
    return bounds, counts
