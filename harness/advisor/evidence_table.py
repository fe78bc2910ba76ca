"""A verdict's evidence as a reader wants it: named quantities with their units, one a row.

advice.json keeps the raw keys and numbers (every number in a verdict is in its evidence);
this is only how the Advice section shows them. A key not listed here still shows, its
name spelled out and its value as it is, so new evidence never disappears from the report.
"""

from __future__ import annotations

from typing import Any

# key -> (name, unit); units: share (shown as %), count, blocks, tokens, bytes, per_min,
# number (3 significant digits), text.
FIELDS: dict[str, tuple[str, str]] = {
    "preemption_level": ("preemption level", "text"),
    "preemptions": ("preemptions in the run", "count"),
    "preemptions_per_finished": ("preemptions per finished request", "number"),
    "preemptions_per_minute": ("preemptions per minute", "per_min"),
    "saturated_share": ("time with the KV cache saturated", "share"),
    "waiting_share": ("time with requests waiting", "share"),
    "waiting_kv_blocked_share": ("time waiting for free KV blocks", "share"),
    "waiting_low_usage_share": ("time waiting while KV usage was low", "share"),
    "max_usage": ("peak KV usage", "share"),
    "mean_running": ("running requests, mean", "number"),
    "max_running": ("running requests, most", "count"),
    "max_num_seqs": ("max_num_seqs", "count"),
    "max_num_batched_tokens": ("token budget per step", "tokens"),
    "kv_cache_dtype": ("KV cache dtype", "text"),
    "bytes_per_element": ("bytes per KV element", "bytes"),
    "kv_bytes_per_token_per_gpu": ("KV bytes per token per GPU", "bytes"),
    "pool_blocks": ("KV pool", "blocks"),
    "demand_blocks": ("KV demand at peak", "blocks"),
    "demand_tokens": ("KV demand at peak", "tokens"),
    "demand_source": ("demand measured by", "text"),
    "gpu_memory_utilization": ("gpu_memory_utilization", "share"),
    "max_model_len": ("context limit (max_model_len)", "tokens"),
    "max_tokens": ("longest request (prompt + output)", "tokens"),
    "max_share_of_limit": ("longest request / context limit", "share"),
    "allocator": ("KV allocator", "text"),
    "fingerprinted_requests": ("requests fingerprinted", "count"),
    "prompt_tokens": ("prompt tokens", "tokens"),
    "identical_hit_ratio_possible": ("hit ratio possible, identical prefixes", "share"),
    "near_identical_hit_ratio_possible": ("hit ratio possible, near-identical prefixes", "share"),
    "observed_hit_ratio": ("hit ratio observed", "share"),
    "near_identical_requests": ("requests with near-identical prefixes", "count"),
    "hit_ratio_possible": ("hit ratio possible", "share"),
    "prefill_tokens_saved": ("prefill tokens saved", "tokens"),
}


def _value(value: Any, unit: str) -> str:
    if isinstance(value, bool) or unit == "text" or not isinstance(value, (int, float)):
        return str(value)
    if unit == "share":
        return f"{value:.0%}" if value >= 0.01 or value == 0 else f"{value:.2%}"
    if unit in ("count", "blocks", "tokens"):
        text = f"{value:,.0f}"
        return text if unit == "count" else f"{text} {unit}"
    if unit == "bytes":
        return f"{value:,.0f} B"
    if unit == "per_min":
        return f"{value:.3g} /min"
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def evidence_rows(evidence: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, value with unit) for each scalar in `evidence`, in its order (lists, dicts and
    unknown values are left to advice.json)."""
    rows = []
    for key, value in evidence.items():
        if value is None or isinstance(value, (list, dict)):
            continue
        name, unit = FIELDS.get(key, (key.replace("_", " "), "number"))
        rows.append((name, _value(value, unit)))
    return rows
