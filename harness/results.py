"""Load a results bundle for analysis: `load("runs/20261129-120000-chat")`.

    from harness.results import load
    r = load("runs/x")
    r.requests.groupby("error_class").size()
    r.server.plot(x="time_unix", y="kv_usage_ratio")

`requests` has one row per request (schema in harness/request_record.py; `itl_s` is a list
per row), `server` one row per exporter sample (time_unix, target, model, instance, up and
every canonical quantity), `run` and `summary` are the JSON files as dicts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

BUNDLE_FILES = ("run.json", "requests.parquet", "server.parquet", "summary.json")


@dataclass(slots=True)
class RunResults:
    path: Path
    requests: pd.DataFrame
    server: pd.DataFrame
    run: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def measured(self) -> pd.DataFrame:
        """Requests of the measurement proper (calibration probes excluded)."""
        return self.requests[self.requests["phase"] == "measure"]


def load(path: str | Path) -> RunResults:
    p = Path(path)
    missing = [name for name in BUNDLE_FILES if not (p / name).exists()]
    if missing:
        raise FileNotFoundError(f"{p} is not a complete results bundle: missing {', '.join(missing)}")
    return RunResults(
        path=p,
        requests=pd.read_parquet(p / "requests.parquet"),
        server=pd.read_parquet(p / "server.parquet"),
        run=json.loads((p / "run.json").read_text(encoding="utf-8")),
        summary=json.loads((p / "summary.json").read_text(encoding="utf-8")),
    )
