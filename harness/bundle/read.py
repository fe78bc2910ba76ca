"""Read a results bundle: the one reader of run.json, requests.parquet and server.parquet.

Invariants:
- `requests` has every column of the request record (missing ones are added as NaN/None),
  sorted by `send_time_unix`, calibration probes included; `measured` are the requests that
  count. Extra columns pass through untouched.
- `server` is the exporter's samples, one row per (sample, engine instance), with every
  fixed column and canonical quantity, sorted by `time_unix`; empty (with the columns) when
  the run recorded no server samples.
- A folder without run.json, requests.parquet or server.parquet, a file that does not
  parse, or request rows without the columns no analysis can do without, raises
  BundleError with a one-line message naming the file.
- `spans` is spans.parquet when the run received server spans (empty otherwise); requests
  whose stream carried no server timing take their `server_*` values from their joined span
  (`bundle.spans.fill_from_spans`, `server_timing_source` "otlp:<format>").
- Reading never mutates the folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.bundle.deployment import DeploymentFacts
from harness.bundle.errors import BundleError
from harness.bundle.jsonfile import read_json_object
from harness.bundle.schema import (
    REQUEST_COLUMNS,
    REQUESTS,
    REQUIRED_FILES,
    REQUIRED_REQUEST_COLUMNS,
    RUN_JSON,
    SERVER,
    SERVER_COLUMNS,
    SUMMARY,
    TEXT_COLUMNS,
)
from harness.bundle.spans import SPANS, empty_spans, fill_from_spans

_NUMERIC_REQUEST_COLUMNS = (
    "send_time_unix",
    "ttft_s",
    "e2e_s",
    "schedule_lag_s",
    "prompt_tokens",
    "output_tokens",
    "server_ttft_s",
    "server_e2e_s",
    "server_queue_time_s",
)


@dataclass(frozen=True, slots=True)
class Bundle:
    """One run. `path` is None for bundles built in memory (tests, sweeps); `summary` is
    None until summary.json is written."""

    run: dict[str, Any]
    requests: pd.DataFrame
    server: pd.DataFrame
    path: Path | None = None
    summary: dict[str, Any] | None = None
    client_log_warnings: list[str] = field(default_factory=list)
    spans: pd.DataFrame = field(default_factory=empty_spans)  # spans.parquet (`bundle.spans`)

    @property
    def measured(self) -> pd.DataFrame:
        """Requests of the measurement proper (calibration probes excluded)."""
        return measured(self.requests)

    @property
    def deployment(self) -> DeploymentFacts | None:
        """run.json's deployment facts (None for a run that recorded none); BundleError when
        they are malformed. Parsed on use, so a bad record stops only the readers that need it."""
        data = self.run.get("deployment")
        return None if data is None else DeploymentFacts.from_json(data)


def _ensure(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    frame = frame.copy()
    for c in columns:
        if c not in frame.columns:
            frame[c] = None if c in TEXT_COLUMNS else np.nan
    return frame


def normalise_requests(frame: pd.DataFrame) -> pd.DataFrame:
    frame = _ensure(frame, REQUEST_COLUMNS)
    frame["ok"] = frame["ok"].fillna(False).astype(bool)
    for c in _NUMERIC_REQUEST_COLUMNS:
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(float)
    return frame.sort_values("send_time_unix", kind="stable").reset_index(drop=True)


def normalise_server(frame: pd.DataFrame) -> pd.DataFrame:
    if "time_unix" not in frame.columns and "t" in frame.columns:  # raw exporter JSON lines
        frame = frame.rename(columns={"t": "time_unix"})
    frame = _ensure(frame, SERVER_COLUMNS)
    frame["time_unix"] = pd.to_numeric(frame["time_unix"], errors="coerce").astype(float)
    frame["up"] = ~frame["up"].eq(False)  # unknown counts as up, as before
    return frame.sort_values("time_unix", kind="stable").reset_index(drop=True)


def measured(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests that count: calibration probes (phase != "measure") are excluded."""
    if "phase" in requests.columns:
        return requests[requests["phase"].fillna("measure") == "measure"]
    return requests


def _read_parquet(path: Path, required: tuple[str, ...] = ()) -> pd.DataFrame:
    try:
        frame = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise BundleError(f"cannot read {path}: {exc}") from None
    absent = [c for c in required if c not in frame.columns]
    if absent and len(frame):  # no rows, nothing lacking: a run that sent no request
        raise BundleError(f"{path} lacks column(s) {', '.join(absent)}")
    return frame


def read_bundle(directory: str | Path, required: tuple[str, ...] = REQUIRED_FILES) -> Bundle:
    """The bundle in `directory`; every file in `required` must be there (summary.json is
    read when present)."""
    d = Path(directory)
    if not d.is_dir():
        raise BundleError(f"{d} is not a results bundle folder")
    missing = [name for name in required if not (d / name).exists()]
    if missing:
        raise BundleError(f"{d} is not a complete results bundle: missing {', '.join(missing)}")
    spans = _read_parquet(d / SPANS) if (d / SPANS).exists() else empty_spans()
    requests = normalise_requests(_read_parquet(d / REQUESTS, REQUIRED_REQUEST_COLUMNS))
    return Bundle(
        read_json_object(d / RUN_JSON),
        fill_from_spans(requests, spans),
        normalise_server(_read_parquet(d / SERVER)),
        d,
        read_json_object(d / SUMMARY) if (d / SUMMARY).exists() else None,
        client_log_warnings(d),
        spans,
    )


def client_log_warnings(directory: Path) -> list[str]:
    """Locust's own CPU warnings from the bundle's logs/locust-*.log ('CPU usage above 90%!',
    'CPU usage was too high ...'): the load generator saying it could not keep up."""
    out: list[str] = []
    for path in sorted(directory.glob("logs/locust-*.log")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        out += [f"{path.name}: {line.strip()[:300]}" for line in text.splitlines() if "CPU usage" in line]
    return out


def from_frames(run: dict[str, Any], requests: pd.DataFrame, server: pd.DataFrame) -> Bundle:
    return Bundle(run, normalise_requests(requests), normalise_server(server))
