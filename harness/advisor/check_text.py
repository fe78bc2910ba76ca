"""A verdict's `check` (its change applied to the server and measured: `harness.verify`) in
words: one line, for the console and the advice's Markdown. Reads advice.json's dict only."""

from __future__ import annotations

from typing import Any

from harness.bundle.finding import Finding
from harness.formatting import pct

SHOWN = ("preemptions", "ttft_p99_s", "prefix_hit_ratio")


def fmt(metric: str, value: Any) -> str:
    if value is None:
        return "n/a"
    if metric == "prefix_hit_ratio":
        return pct(value, 1, "n/a")
    if metric.endswith("_per_s"):
        return f"{value:,.3g}/s"
    if metric.endswith("_s"):
        return f"{value:.3g} s"
    return f"{value:,.3g}"


def reason_text(check: dict[str, Any]) -> str:
    return Finding.from_json(check.get("reason") or "").text


def check_line(action: str, check: dict[str, Any]) -> str:
    """`action (flags): status: predicted against measured per metric`, or why not applicable."""
    flags = " ".join((check.get("change") or {}).get("flags") or []) or "no flags"
    head = f"{action} ({flags}): {check.get('status')}"
    measured = check.get("measured") or {}
    if check.get("status") == "not applicable" or not measured:
        return f"{head}: {reason_text(check)}"
    predicted, as_run, baseline = (check.get(k) or {} for k in ("predicted", "as_run", "baseline"))
    figures = "; ".join(
        f"{m} predicted {fmt(m, predicted.get(m))}, measured {fmt(m, measured.get(m))}"
        f" (as run {fmt(m, as_run.get(m))}, rerun unchanged {fmt(m, baseline.get(m))})"
        for m in SHOWN
        if measured.get(m) is not None
    )
    misses = "; ".join(
        f"{m['subject']} off by {m['error_share']:+.0%}: {m['text']}"
        for m in check.get("misses") or []
        if m.get("error_share") is not None
    )
    return f"{head}: {figures}" + (f"; predictions off by more than 30%: {misses}" if misses else "")
