"""What each peer client's run is reduced to, whatever the client: TTFT p50/p99 and mean,
and the per-request mean ITL averaged over requests (seconds)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Result:
    ttft_p50_s: float
    ttft_p99_s: float
    ttft_mean_s: float
    itl_mean_s: float

    @classmethod
    def of(cls, ttft: np.ndarray, itl: np.ndarray) -> Result:
        """From per-request TTFTs and per-request mean ITLs (non-finite values dropped)."""
        ttft, itl = ttft[np.isfinite(ttft)], itl[np.isfinite(itl)]
        p50, p99 = np.percentile(ttft, [50, 99])
        return cls(float(p50), float(p99), float(ttft.mean()), float(itl.mean()))
