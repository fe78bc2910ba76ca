"""What every section of a run's report reads: the summary (summary.json's dict, the only
source of figures), the figures drawn for it (name -> path in the report folder) and the
advice (None when the folder has none)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.advisor.record import Advice


@dataclass(frozen=True, slots=True)
class RunReport:
    summary: dict[str, Any]
    figures: dict[str, str] = field(default_factory=dict)
    advice: Advice | None = None
