"""Bunched chunks: how many inter-token gaps are under a millisecond, and who bunched them.

A decode step gives each running sequence one token, so an engine whose own time per token
is well above BUNCHED_GAP_S never produces two tokens of one stream that close together:
such a pair was held somewhere and delivered at once. Where it was held decides what the
client's per-token figures are worth:
- "engine": the engine's own per-token time is itself under ENGINE_FAST_S (a tiny model,
  several tokens per step): the short gaps are real.
- "client": the client read late — its lag above its delay floor (the self-check's, p50)
  is at least the engine's per-token time, so a late read found several chunks waiting. Its
  gaps are the client's, not the server's: the self-check marks the run unreliable.
- "server": the client read in time and the chunks still came bunched, so they left the
  server's HTTP layer (or crossed the network) together. The client measured faithfully
  what users of that server would see; a note says so.
- "unknown": no server timing (or no client lag) to compare with.

The engine's per-token time is the median over requests of its own decode time over the
tokens after the first (the per-request server timings), else the mean of its
inter-token-latency histogram over the run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from harness.analysis.latency import itl_values
from harness.bundle.finding import Finding

BUNCHED_GAP_S = 0.001
BUNCHED_SHARE = 0.20  # above this share of gaps, bunching is a finding of the self-check
ENGINE_FAST_S = 0.002
ITL_HISTOGRAM = "inter_token_latency_seconds"

Cause = Literal["none", "engine", "client", "server", "unknown"]


@dataclass(frozen=True, slots=True)
class Bunching:
    gaps: int
    bunched_share: float | None  # share of gaps under BUNCHED_GAP_S
    engine_token_s: float | None  # the engine's own time per token
    engine_token_source: str | None  # "per_request" or "histogram"
    cause: Cause

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def finding(self) -> Finding | None:
        """What the self-check says about it: a reason (the run is unreliable) when the
        client bunched the gaps, a note for any other cause, None when few gaps are bunched."""
        if self.cause == "none":
            return None
        share = f"{self.bunched_share:.0%} of {self.gaps} inter-token gaps are under 1 ms"
        engine = (
            f"the engine's own time per token is {self.engine_token_s * 1000:.1f} ms"
            if self.engine_token_s is not None
            else "the engine's own time per token is unknown"
        )
        if self.cause == "engine":
            return Finding(
                "bunched_by_engine", f"{share}, and {engine}: the engine produces tokens that fast"
            )
        if self.cause == "client":
            return Finding(
                "bunched_by_client",
                f"{share} while {engine}: the client read chunks late and in bunches, so its per-token "
                "gaps are its own, not the server's (add Locust workers or lower users per worker)",
            )
        if self.cause == "server":
            return Finding(
                "bunched_by_server",
                f"{share} while {engine} and the client read in time: the server delivered its chunks "
                "bunched (its HTTP layer or the network held them)",
            )
        return Finding("bunched_unknown", f"{share}; with no server timing to compare, the cause is unknown")


def engine_token_time(ok: pd.DataFrame, server: pd.DataFrame) -> tuple[float | None, str | None]:
    """(the engine's time per token, its source); see the module doc."""
    if "server_decode_time_s" in ok.columns and len(ok):
        choices = ok["n"].fillna(1).clip(lower=1) if "n" in ok.columns else 1
        after_first = ok["output_tokens"].astype(float) / choices - 1
        per_token = (pd.to_numeric(ok["server_decode_time_s"], errors="coerce") / after_first).where(
            after_first >= 1
        )
        per_token = per_token[np.isfinite(per_token)]
        if len(per_token):
            return float(per_token.median()), "per_request"
    total, count = (f"{ITL_HISTOGRAM}_{k}" for k in ("sum", "count"))
    if {total, count} <= set(server.columns):
        up = server[server["up"].astype(bool)] if "up" in server.columns else server
        sums, counts = (pd.to_numeric(up[c], errors="coerce").dropna() for c in (total, count))
        if len(sums) >= 2 and len(counts) >= 2 and counts.iloc[-1] > counts.iloc[0]:
            return float((sums.iloc[-1] - sums.iloc[0]) / (counts.iloc[-1] - counts.iloc[0])), "histogram"
    return None, None


def bunching(ok: pd.DataFrame, server: pd.DataFrame, client_lag_p50_s: float | None) -> Bunching:
    """The bunching of successful requests' chunks (see the module doc); `client_lag_p50_s`
    is the self-check's lag p50 (None when it could not be measured)."""
    gaps = itl_values(ok)
    gaps = gaps[np.isfinite(gaps)]
    if gaps.size == 0:
        return Bunching(0, None, None, None, "none")
    share = float((gaps < BUNCHED_GAP_S).mean())
    engine, source = engine_token_time(ok, server)
    if share <= BUNCHED_SHARE:
        cause: Cause = "none"
    elif engine is None:
        cause = "unknown"
    elif engine < ENGINE_FAST_S:
        cause = "engine"
    elif client_lag_p50_s is None:
        cause = "unknown"
    else:
        cause = "client" if client_lag_p50_s >= engine else "server"
    return Bunching(int(gaps.size), share, engine, source, cause)
