"""Service-level objectives: parsing `ttft=1s,tpot=100ms` and testing requests against them.

Invariants:
- Thresholds are seconds internally; durations use kvscope's one grammar (`exporter.units`:
  500ms, 2s, 1m) and must carry a unit, because a bare "100" is as likely to mean
  milliseconds as seconds and a wrong guess is silent.
- A request meets the SLOs only when it succeeded and every metric with a threshold is
  within it. A metric a request cannot have (TPOT with fewer than two tokens per choice)
  does not fail it: there was no decode phase to be slow in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from exporter.units import parse_duration

# name -> meaning; "itl" is the request's worst inter-token gap (a stall), not its mean.
SLO_METRICS: dict[str, str] = {
    "ttft": "time to first token",
    "tpot": "time per output token after the first",
    "e2e": "end-to-end request latency",
    "itl": "longest inter-token gap within a request",
}


@dataclass(frozen=True, slots=True)
class Slos:
    """Thresholds in seconds; None means no objective on that metric."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None
    itl: float | None = None

    def items(self) -> list[tuple[str, float]]:
        return [(k, v) for k in SLO_METRICS if (v := getattr(self, k)) is not None]

    def __bool__(self) -> bool:
        return bool(self.items())

    def describe(self) -> str:
        return ", ".join(f"{k} ≤ {v * 1000:g} ms" for k, v in self.items()) or "none"

    def to_dict(self) -> dict[str, float]:
        return dict(self.items())


def parse_slos(text: str | None) -> Slos:
    """'ttft=1s,tpot=100ms' -> Slos(ttft=1.0, tpot=0.1). Empty or None -> no SLOs."""
    if not text or not text.strip():
        return Slos()
    values: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in SLO_METRICS:
            raise ValueError(
                f"bad SLO {part.strip()!r}: use NAME=DURATION with NAME one of {', '.join(SLO_METRICS)}"
            )
        if key in values:
            raise ValueError(f"SLO {key!r} given twice")
        seconds = parse_duration(value, require_unit=True)
        if seconds <= 0:
            raise ValueError(f"SLO {key!r} must be positive")
        values[key] = seconds
    return Slos(**values)


def per_request_metrics(requests: pd.DataFrame) -> pd.DataFrame:
    """ttft, tpot, e2e and worst itl per request (NaN where undefined), indexed like `requests`.

    TPOT divides the decode time by the tokens after the first *per choice*: with parallel
    sampling (n > 1) the server's completion_tokens covers all n choices, streamed together.
    """
    n = requests["n"].fillna(1).clip(lower=1) if "n" in requests.columns else 1
    per_choice = requests["output_tokens"].astype(float) / n
    decode = requests["e2e_s"] - requests["ttft_s"]
    tpot = (decode / (per_choice - 1)).where(per_choice >= 2)
    itl_max = requests["itl_s"].map(_max_or_nan) if "itl_s" in requests.columns else np.nan
    return pd.DataFrame(
        {"ttft": requests["ttft_s"], "tpot": tpot, "e2e": requests["e2e_s"], "itl": itl_max},
        index=requests.index,
    )


def _max_or_nan(values) -> float:
    if values is None:
        return np.nan
    arr = np.asarray(values, dtype=float)
    return float(arr.max()) if arr.size else np.nan


def meets_slos(requests: pd.DataFrame, slos: Slos) -> pd.Series:
    """Boolean per request: ok and within every threshold (see the module invariants)."""
    ok = requests["ok"].astype(bool)
    if not slos:
        return ok
    metrics = per_request_metrics(requests)
    for key, limit in slos.items():
        value = metrics[key]
        within = value <= limit
        # NaN TPOT/ITL on an ok request: the metric does not exist for it, so it cannot miss.
        if key in ("tpot", "itl"):
            within = within | value.isna()
        ok = ok & within
    return ok
