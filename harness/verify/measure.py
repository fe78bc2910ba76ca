"""What a run measured, in the terms a replay predicts: the figures a verdict's `check`
compares (METRICS).

- preemptions: the server's counter, its increase over the run (as the diagnosis reads it);
- ttft_p50_s, ttft_p99_s: the server's own per-request TTFT where the bundle has it for most
  requests (the simulator models the server), else the client's (`fidelity.measured_run`'s rule);
- output_tokens_per_s: output tokens of the completed requests over the span from the first
  send to the last end (a replay's is its tokens over its duration from its first arrival);
- prefix_hit_ratio: the server's prefix-cache hit tokens over queried tokens, both counters'
  increases over the run (what the miss-ratio curve starts from), else the completed requests'
  cached prompt tokens over their prompt tokens.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from exporter.series import increase
from harness.advisor.advice import diagnose_run
from harness.advisor.evidence import completed
from harness.advisor.fidelity import SERVER_TTFT_SHARE
from harness.advisor.run_inputs import RunInputs

METRICS = ("preemptions", "ttft_p50_s", "ttft_p99_s", "output_tokens_per_s", "prefix_hit_ratio")


def _ttft(done: pd.DataFrame) -> np.ndarray:
    server = pd.to_numeric(done.get("server_ttft_s", pd.Series(dtype=float)), errors="coerce")
    if len(done) and server.notna().mean() >= SERVER_TTFT_SHARE:
        return server.dropna().to_numpy(float)
    return pd.to_numeric(done["ttft_s"], errors="coerce").dropna().to_numpy(float)


def _increase(rows: pd.DataFrame, column: str) -> float | None:
    return increase(zip(rows["time_unix"], rows[column].where(rows[column].notna(), None)))


def _counter_ratio(server: pd.DataFrame) -> float | None:
    need = {"prefix_cache_hits_tokens", "prefix_cache_queries_tokens", "time_unix"}
    if server.empty or not need <= set(server.columns):
        return None
    ratios = []
    for _, rows in server.groupby([c for c in ("target", "instance") if c in server.columns], dropna=False):
        rows = rows.sort_values("time_unix")
        q, h = (_increase(rows, c) for c in ("prefix_cache_queries_tokens", "prefix_cache_hits_tokens"))
        if q and h is not None:
            ratios.append((q, h))
    total = sum(q for q, _ in ratios)
    return sum(h for _, h in ratios) / total if total else None


def _request_ratio(done: pd.DataFrame) -> float | None:
    cached = pd.to_numeric(
        done.get("server_cached_prompt_tokens", done.get("cached_tokens")), errors="coerce"
    )
    prompt = pd.to_numeric(done["prompt_tokens"], errors="coerce")
    ok = cached.notna() & prompt.notna()
    return float(cached[ok].sum() / prompt[ok].sum()) if ok.any() and prompt[ok].sum() else None


def measured_metrics(inputs: RunInputs) -> dict[str, float | None]:
    """METRICS for one run (None where the bundle cannot tell)."""
    done = completed(inputs.requests)
    diag = diagnose_run(inputs)
    ttft = _ttft(done)
    if len(done):
        span = float((done["send_time_unix"] + done["e2e_s"]).max() - done["send_time_unix"].min())
        tokens = float(pd.to_numeric(done["output_tokens"], errors="coerce").sum())
    else:
        span, tokens = 0.0, 0.0
    hit = _counter_ratio(inputs.server)
    return {
        "preemptions": None if diag is None else diag.preemptions,
        "ttft_p50_s": float(np.percentile(ttft, 50)) if ttft.size else None,
        "ttft_p99_s": float(np.percentile(ttft, 99)) if ttft.size else None,
        "output_tokens_per_s": round(tokens / span, 3) if span > 0 else None,
        "prefix_hit_ratio": hit if hit is not None else _request_ratio(done),
    }
