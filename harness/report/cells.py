"""Table cells the run report's sections share: a time of day, and a distribution's row
under DIST_HEADERS."""

from __future__ import annotations

import time
from typing import Any

from harness.formatting import ms_cell

DIST_HEADERS = ["metric", "n", "mean ms", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "max ms"]


def when(t: Any) -> str:
    if isinstance(t, (int, float)):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    return str(t) if t else "?"


def dist_row(name: str, d: dict[str, Any]) -> list[str]:
    return [name, str(d["count"])] + [ms_cell(d[k]) for k in ("mean", "p50", "p90", "p95", "p99", "max")]
