"""Client-side latency, throughput, goodput, errors and achieved lengths of one run.

Invariants:
- Only measured requests count (calibration probes are excluded, see `bundle.measured`).
- Latency distributions use successful requests only; a failed request has no meaningful
  TTFT, and it is counted instead under errors (and fails every SLO).
- The measurement window runs from the first send to the last completion (send + E2E, or
  the send itself for a request that never finished), so throughput is work done per second
  of load, independent of how long the harness took to start or drain.
- ITL is one value per request, its mean inter-token latency: the time from its first to
  its last token over the tokens in between (sum of its gaps / (output tokens - choices)),
  AIPerf's and GuideLLM's definition, so figures compare across tools. It equals
  (E2E - TTFT) / (tokens - 1) up to the time after the last token, and it does not collapse
  when chunks arrive bunched: a bunch shifts time between gaps, never out of the request.
- ITL pooled (`itl_pooled`) is every inter-token gap of every successful request in one
  distribution (what `vllm bench serve` calls ITL): a long answer weighs more, and bunched
  chunks pull its percentiles towards 0. TPOT is one value per request.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.slo import Slos, meets_slos, per_request_metrics
from harness.analysis.stats import Distribution, distribution
from harness.bundle.read import measured


@dataclass(frozen=True, slots=True)
class Throughput:
    window_s: float
    requests_per_s: float  # successful requests
    output_tokens_per_s: float
    prompt_tokens_per_s: float
    total_tokens_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Goodput:
    slos: dict[str, float]
    requests_meeting: int
    requests_total: int
    attainment: float | None  # share of all measured requests (failed ones included) meeting every SLO
    requests_per_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Errors:
    total: int
    failed: int
    error_rate: float | None
    by_class: dict[str, int] = field(default_factory=dict)
    by_status: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)  # first message per class (server text: escape it)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class LatencyReport:
    ttft: Distribution
    itl: Distribution  # per-request mean inter-token latency
    tpot: Distribution
    e2e: Distribution
    throughput: Throughput
    goodput: Goodput
    errors: Errors
    prompt_tokens: Distribution
    output_tokens: Distribution
    length_accuracy: dict[str, float | None]
    usage_sources: dict[str, int]
    itl_pooled: Distribution  # every gap of every request

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def window_bounds(requests: pd.DataFrame) -> tuple[float, float] | None:
    """(first send, last completion) in Unix seconds, or None without requests."""
    send = requests["send_time_unix"].dropna()
    if send.empty:
        return None
    end = (requests["send_time_unix"] + requests["e2e_s"].fillna(0.0)).max()
    return float(send.min()), float(max(end, send.max()))


def throughput(requests: pd.DataFrame) -> Throughput:
    bounds = window_bounds(requests)
    ok = requests[requests["ok"]]
    if bounds is None:
        return Throughput(0.0, 0.0, 0.0, 0.0, 0.0)
    window = max(bounds[1] - bounds[0], 1e-9)
    out = float(ok["output_tokens"].fillna(0).sum())
    prompt = float(ok["prompt_tokens"].fillna(0).sum())
    return Throughput(window, len(ok) / window, out / window, prompt / window, (out + prompt) / window)


def goodput(requests: pd.DataFrame, slos: Slos, window_s: float) -> Goodput:
    meeting = int(meets_slos(requests, slos).sum())
    total = len(requests)
    return Goodput(
        slos.to_dict(),
        meeting,
        total,
        meeting / total if total else None,
        meeting / window_s if window_s > 0 else 0.0,
    )


def errors(requests: pd.DataFrame) -> Errors:
    failed = requests[~requests["ok"]]
    classes = failed["error_class"].fillna("unknown")
    by_class = {str(k): int(v) for k, v in classes.value_counts().items()}
    status = failed["status_code"].fillna(0).astype(int)
    by_status = {str(k): int(v) for k, v in status[status > 0].value_counts().items()}
    examples: dict[str, str] = {}
    if "error_message" in failed.columns:
        for cls, msg in zip(classes, failed["error_message"]):
            if cls not in examples and isinstance(msg, str) and msg:
                examples[cls] = msg[:300]
    total = len(requests)
    return Errors(total, len(failed), len(failed) / total if total else None, by_class, by_status, examples)


def itl_values(requests: pd.DataFrame) -> np.ndarray:
    lists = [np.asarray(v, dtype=float) for v in requests["itl_s"] if v is not None and len(v)]
    return np.concatenate(lists) if lists else np.empty(0)


def per_request_itl(ok: pd.DataFrame) -> pd.Series:
    """Each request's mean inter-token latency (see the module invariants), NaN for a request
    with no token after its first (per choice)."""
    choices = ok["n"].fillna(1).clip(lower=1) if "n" in ok.columns else 1
    tokens = ok["output_tokens"].astype(float)
    spans = ok["itl_s"].map(lambda v: float(np.sum(v)) if v is not None and len(v) else np.nan)
    between = tokens - choices
    return (spans / between).where(between >= 1)


def _length_accuracy(ok: pd.DataFrame) -> dict[str, float | None]:
    """Median achieved/target ratio: 1.0 means the workload got the lengths it asked for."""
    out: dict[str, float | None] = {}
    for kind in ("prompt", "output"):
        target = ok[f"target_{kind}_tokens"].astype(float)
        got = ok[f"{kind}_tokens"].astype(float)
        ratio = (got / target).where(target > 0).dropna()
        out[f"{kind}_median_ratio"] = float(ratio.median()) if len(ratio) else None
    return out


def analyse_latency(all_requests: pd.DataFrame, slos: Slos | None = None) -> LatencyReport:
    """Every client-side figure of the run (see the module invariants)."""
    requests = measured(all_requests)
    ok = requests[requests["ok"]]
    metrics = per_request_metrics(ok)
    tp = throughput(requests)
    return LatencyReport(
        ttft=distribution(ok["ttft_s"].to_numpy(dtype=float)),
        itl=distribution(per_request_itl(ok).to_numpy(dtype=float)),
        tpot=distribution(metrics["tpot"].to_numpy(dtype=float)),
        e2e=distribution(ok["e2e_s"].to_numpy(dtype=float)),
        throughput=tp,
        goodput=goodput(requests, slos or Slos(), tp.window_s),
        errors=errors(requests),
        prompt_tokens=distribution(ok["prompt_tokens"].to_numpy(dtype=float)),
        output_tokens=distribution(ok["output_tokens"].to_numpy(dtype=float)),
        length_accuracy=_length_accuracy(ok),
        usage_sources={str(k): int(v) for k, v in ok["usage_source"].fillna("none").value_counts().items()},
        itl_pooled=distribution(itl_values(ok)),
    )


def throughput_over_time(all_requests: pd.DataFrame, bin_s: float = 1.0) -> pd.DataFrame:
    """Completions per bin (by completion time): t_s (bin start, from the first send),
    requests_per_s and output_tokens_per_s. Empty frame without successful requests."""
    requests = measured(all_requests)
    bounds = window_bounds(requests)
    ok = requests[requests["ok"]]
    if bounds is None or ok.empty:
        return pd.DataFrame(columns=["t_s", "requests_per_s", "output_tokens_per_s"])
    done = (ok["send_time_unix"] + ok["e2e_s"] - bounds[0]).to_numpy(dtype=float)
    edges = np.arange(0.0, (bounds[1] - bounds[0]) + bin_s, bin_s)
    if len(edges) < 2:
        edges = np.array([0.0, bin_s])
    idx = np.clip(np.digitize(done, edges) - 1, 0, len(edges) - 2)
    reqs = np.bincount(idx, minlength=len(edges) - 1)
    toks = np.bincount(
        idx, weights=ok["output_tokens"].fillna(0).to_numpy(dtype=float), minlength=len(edges) - 1
    )
    return pd.DataFrame(
        {"t_s": edges[:-1], "requests_per_s": reqs / bin_s, "output_tokens_per_s": toks / bin_s}
    )
