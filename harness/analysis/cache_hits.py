"""Cache hits a workload did not ask for: a rerun that found the last run's prompts cached.

A workload that shares nothing between requests (`WorkloadSpec.shares` False: chat,
long_context, rate, bursty) should see at most the chat template cached. A request that
found at least HIT_SHARE of its prompt (and at least MIN_TOKENS tokens) in the server's
prefix cache was served from an earlier request's blocks — an earlier run with the same
--seed, or another client sending the same text — so its TTFT is lower than the workload
would get from a cold cache. The count comes from the server's own report of cached tokens
(`usage.prompt_tokens_details.cached_tokens`, or the reference engine's timing object).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.bundle.finding import Finding
from harness.workload.options import WORKLOADS

HIT_SHARE = 0.5
MIN_TOKENS = 32


def cached_tokens(requests: pd.DataFrame) -> pd.Series:
    """Per request, the larger of the two reports of cached prompt tokens (NaN: none)."""
    columns = [c for c in ("cached_tokens", "server_cached_prompt_tokens") if c in requests.columns]
    if not columns:
        return pd.Series(float("nan"), index=requests.index)
    return requests[columns].apply(pd.to_numeric, errors="coerce").max(axis=1)


def unexpected_hits(ok: pd.DataFrame, run: dict[str, Any]) -> Finding | None:
    """A warning when a workload not meant to share found its prompts cached, else None."""
    config = run.get("config") if isinstance(run.get("config"), dict) else {}
    name = config.get("workload") or (str(ok["workload"].iloc[0]) if len(ok) else None)
    spec = WORKLOADS.get(name) if isinstance(name, str) else None
    if spec is None or spec.shares or ok.empty:
        return None
    cached = cached_tokens(ok)
    prompt = pd.to_numeric(ok["prompt_tokens"], errors="coerce")
    hit = (cached >= MIN_TOKENS) & (cached >= HIT_SHARE * prompt)
    if not hit.any():
        return None
    seed = run.get("seed", config.get("seed"))
    return Finding(
        "unexpected_cache_hits",
        f"{int(hit.sum())} of {len(ok)} requests found at least {HIT_SHARE:.0%} of their prompt in the "
        f"server's prefix cache, though the {name} workload shares nothing between requests: the cache "
        f"held these prompts from an earlier run (seed {seed}) or another client, so TTFT is lower "
        "than a cold cache would give",
    )
