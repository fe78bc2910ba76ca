"""`kvscope probe BUNDLE`: the pool's measured terms from a run, without sending a request.

Lengths: the p50, p90 and p99 of prompt + output over the run's successful requests (the
"higher" percentile: a length some request really had).

Fit: at each KV sample (the exporter's, once a second), the tokens each request held are
known from its own record: prompt + tokens received so far - 1, from its first token to its
end. Samples where a request was between sending and its first token (queued or in prefill:
its occupancy is unknown), or where the preemption counter moved, are left out. Then
usage = fixed x requests + tokens / capacity, by least squares, without intercept (an idle
pool reads 0): 1 / slope is the pool's capacity in tokens, and with the run's pool size
(usable = num_blocks - 1) the fixed share is blocks. The per-request fixed figure includes
the half block that each request's last, partly filled block leaves empty on average.
Shared prefix blocks are held once for several requests, so a run with prefix hits fits low
(a finding says so).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from harness.bundle.finding import Finding
from harness.bundle.read import Bundle, read_bundle
from harness.probe.assemble import finish
from harness.probe.fit import FitPoint, PoolFit
from harness.probe.result import ProbeResult
from harness.probe.stated import StatedPool

PERCENTILES = (50, 90, 99)
MIN_SAMPLES = 3


def completed(requests: pd.DataFrame) -> pd.DataFrame:
    """Successful requests with both token counts."""
    req = requests[requests["ok"].fillna(False).astype(bool)] if "ok" in requests else requests
    return req.dropna(subset=["prompt_tokens", "output_tokens"])


def _ok(bundle: Bundle) -> pd.DataFrame:
    return completed(bundle.measured)


def length_percentiles(requests: pd.DataFrame) -> list[tuple[str, int]]:
    """("p50", tokens), ("p90", ...), ("p99", ...) of prompt + output over the completed
    requests (empty when there are none)."""
    req = completed(requests)
    if req.empty:
        return []
    total = (req["prompt_tokens"] + req["output_tokens"]).astype(int)
    return [(f"p{q}", int(np.percentile(total, q, method="higher"))) for q in PERCENTILES]


def lengths_of_bundle(bundle: Bundle) -> tuple[list[tuple[str, int]], str]:
    rows = length_percentiles(bundle.measured)
    if not rows:
        return [], f"{bundle.path}: no successful request with token counts"
    return rows, f"{bundle.path}: p50/p90/p99 of prompt + output over {len(_ok(bundle)):,} requests"


def run_lengths(path: Path) -> tuple[list[tuple[str, int]], str]:
    return lengths_of_bundle(read_bundle(path))


def _fact(bundle: Bundle, name: str) -> int | None:
    facts = bundle.deployment
    fact = facts.engine.get(name) if facts is not None else None
    value = getattr(fact, "value", None)
    return (
        int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None
    )


def stated_of_bundle(bundle: Bundle, server: pd.DataFrame) -> StatedPool:
    """The pool as the run recorded it: its deployment facts, else its /metrics samples."""

    def sampled(column: str) -> int | None:
        values = server[column].dropna() if column in server else pd.Series(dtype=float)
        return int(values.iloc[-1]) if len(values) else None

    blocks = _fact(bundle, "num_blocks") or sampled("kv_capacity_blocks")
    size = _fact(bundle, "block_size") or sampled("kv_block_size_tokens")
    dialect = (
        server["dialect"].dropna().iloc[-1]
        if "dialect" in server and server["dialect"].notna().any()
        else None
    )
    return StatedPool(
        dialect=dialect,
        num_blocks=blocks,
        block_size=size,
        max_model_len=_fact(bundle, "max_model_len"),
        source="run.json deployment facts, the run's /metrics samples",
    )


def _token_times(req: pd.DataFrame) -> list[tuple[int, float, float, np.ndarray]]:
    """(prompt tokens, first token time, end time, token arrival times) per request."""
    out = []
    for row in req.itertuples(index=False):
        first = row.send_time_unix + row.ttft_s
        if not np.isfinite(first):
            continue
        gaps = np.asarray(row.itl_s if row.itl_s is not None else [], dtype=float)
        times = first + np.concatenate([[0.0], np.cumsum(gaps)])
        out.append((int(row.prompt_tokens), float(first), float(times[-1]), times))
    return out


def held_at(t: float, timelines, pending: list[tuple[float, float]]) -> tuple[int, int, int] | None:
    """(requests holding KV, their prompt tokens, their KV tokens) at `t`; None when some request
    was between sending and its first token then (its occupancy is unknown)."""
    if any(send <= t < first for send, first in pending):
        return None
    n = prompt = kv = 0
    for p, first, end, times in timelines:
        if first <= t < end:
            got = int(np.searchsorted(times, t, side="right"))
            n, prompt, kv = n + 1, prompt + p, kv + p + got - 1
    return n, prompt, kv


def fit_run(bundle: Bundle, server: pd.DataFrame, stated: StatedPool) -> PoolFit:
    req = _ok(bundle)
    timelines = _token_times(req)
    pending = [(s, s + t) for s, t in zip(req["send_time_unix"], req["ttft_s"]) if np.isfinite(s + t)]
    moved = (
        server["preemptions"].diff().fillna(0) > 0
        if "preemptions" in server
        else pd.Series(False, server.index)
    )
    rows = []
    for (t, usage), bad in zip(server[["time_unix", "kv_usage_ratio"]].itertuples(index=False), moved):
        held = None if bad else held_at(t, timelines, pending)
        if held is not None and held[0] > 0:
            rows.append((*held, float(usage)))
    if len(rows) < MIN_SAMPLES or len({r[2] for r in rows}) < 2:
        return PoolFit(
            findings=(
                Finding(
                    "too_few_points",
                    f"{len(rows)} KV sample(s) with every request's occupancy known: too few to fit",
                ),
            )
        )
    n, prompt, kv, usage = (np.array(c, dtype=float) for c in zip(*rows))
    (fixed, per_token), *_ = np.linalg.lstsq(np.column_stack([n, kv]), usage, rcond=None)
    usable = stated.num_blocks - 1 if stated.num_blocks else None
    scale = usable or 1
    fitted = (fixed * n + per_token * kv) * scale
    points = tuple(
        FitPoint(
            int(p),
            int(k - p + n_),
            int(k),
            float(u),
            None if usable is None else float(u * usable),
            float(f),
            float(u * scale - f),
        )
        for n_, p, k, u, f in zip(n, prompt, kv, usage, fitted)
    )
    ok = per_token > 0
    return PoolFit(
        points=points,
        usage_per_token=float(per_token),
        usage_fixed=float(fixed),
        usable_blocks=usable,
        usable_blocks_source=None
        if usable is None
        else f"the run's pool: num_blocks {stated.num_blocks} less the null block",
        tokens_per_block=float(1 / (per_token * usable)) if ok and usable else None,
        fixed_blocks=float(fixed * usable) if usable else None,
        capacity_tokens=float(1 / per_token) if ok else None,
        residual_unit="blocks" if usable else "usage share",
    )


def probe_bundle(
    path: Path, extra_lengths: tuple[tuple[str, int], ...] = (), extra_source: str = ""
) -> ProbeResult:
    """The probe of a run's folder (BundleError when it is not a readable bundle)."""
    bundle = read_bundle(path)
    server = bundle.server
    server = server[server["up"].fillna(False).astype(bool)] if "up" in server else server
    server = server.dropna(subset=["kv_usage_ratio"]).sort_values("time_unix")
    stated = stated_of_bundle(bundle, server)
    lengths, source = lengths_of_bundle(bundle)
    notes: list[Finding] = []
    if server.empty:
        notes.append(Finding("bundle_no_kv_samples", "the run recorded no KV usage samples: nothing to fit"))
        fit = PoolFit()
    else:
        fit = fit_run(bundle, server, stated)
    cached = _ok(bundle)["cached_tokens"].fillna(0).sum() if "cached_tokens" in bundle.requests else 0
    if cached > 0:
        notes.append(
            Finding(
                "bundle_prefix_sharing",
                f"the run's requests hit {int(cached):,} cached prompt tokens: shared blocks are held "
                "once for several requests, so the fitted cost per request is below a lone request's "
                "(a live probe measures that)",
            )
        )
    lengths_all = tuple(lengths) + tuple(extra_lengths)
    sources = "; ".join(s for s in (source, extra_source) if s)
    return finish(str(path), stated, [], notes, lengths_all, sources, fit=fit, mode="bundle")
