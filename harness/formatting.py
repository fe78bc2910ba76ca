"""Numbers as reports and the console show them, in one place: a latency reads the same in
summary.json's sentences, report.md, report.html, the progress line and the sweep table.

A missing value (None or NaN) shows as the caller's `missing` mark, never as 0: "not
measured" and "zero" lead to opposite conclusions. Imports nothing of kvscope.
"""

from __future__ import annotations

import math

DASH = "–"


def is_missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def ms(seconds: float | None, unit: str = " ms", missing: str = "-", fine_below_s: float = 0.0) -> str:
    """Seconds as whole milliseconds (one decimal below `fine_below_s`), e.g. '412 ms'."""
    if is_missing(seconds):
        return missing
    digits = 1 if abs(seconds) < fine_below_s else 0
    return f"{seconds * 1000:.{digits}f}{unit}"


def ms_cell(seconds: float | None) -> str:
    """A report table cell under a header that names the unit ("p99 ms")."""
    return ms(seconds, unit="", missing=DASH, fine_below_s=0.1)


def num(x: float | None, digits: int = 2) -> str:
    return DASH if is_missing(x) else f"{x:.{digits}f}"


def pct(x: float | None, digits: int = 1, missing: str = DASH) -> str:
    return missing if is_missing(x) else f"{x * 100:.{digits}f}%"
