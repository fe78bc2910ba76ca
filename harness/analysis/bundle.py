"""A results bundle in memory: run metadata plus the request and server frames.

Invariants:
- `requests` always has the columns analysis reads (missing ones are added as NaN/None),
  so every analysis function can assume them; extra columns pass through untouched.
- `server` is the exporter's samples, one row per (sample, engine instance), sorted by
  `time_unix`; empty (with the columns) when the run recorded no server samples.
- Loading never mutates the folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

REQUEST_COLUMNS: tuple[str, ...] = (
    "request_id",
    "worker_id",
    "workload",
    "endpoint",
    "send_time_unix",
    "scheduled_time_unix",
    "schedule_lag_s",
    "ttft_s",
    "e2e_s",
    "itl_s",
    "num_chunks",
    "prompt_tokens",
    "output_tokens",
    "usage_source",
    "cached_tokens",
    "target_prompt_tokens",
    "target_output_tokens",
    "finish_reason",
    "status_code",
    "error_class",
    "ok",
    "server_queue_time_s",
    "server_prefill_time_s",
    "server_ttft_s",
    "server_decode_time_s",
    "server_e2e_s",
    "server_num_preemptions",
    "server_cached_prompt_tokens",
)
SERVER_COLUMNS: tuple[str, ...] = (
    "time_unix",
    "target",
    "model",
    "instance",
    "kv_usage_ratio",
    "kv_capacity_blocks",
    "kv_block_size_tokens",
    "kv_capacity_tokens",
    "prefix_cache_queries_tokens",
    "prefix_cache_hits_tokens",
    "preemptions",
    "requests_running",
    "requests_waiting",
    "prompt_tokens",
    "generation_tokens",
    "requests_finished",
    "up",
)
_TEXT = {
    "request_id",
    "worker_id",
    "workload",
    "endpoint",
    "usage_source",
    "finish_reason",
    "error_class",
    "target",
    "model",
    "instance",
}


@dataclass(frozen=True, slots=True)
class Bundle:
    """One run. `path` is None for bundles built in memory (tests, sweeps)."""

    run: dict[str, Any]
    requests: pd.DataFrame
    server: pd.DataFrame
    path: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. advice.json, sweep.json when present


def _ensure(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    frame = frame.copy()
    for c in columns:
        if c not in frame.columns:
            frame[c] = None if c in _TEXT or c == "itl_s" else np.nan
    return frame


def normalise_requests(frame: pd.DataFrame) -> pd.DataFrame:
    frame = _ensure(frame, REQUEST_COLUMNS)
    frame["ok"] = frame["ok"].fillna(False).astype(bool)
    for c in (
        "send_time_unix",
        "ttft_s",
        "e2e_s",
        "schedule_lag_s",
        "prompt_tokens",
        "output_tokens",
        "server_ttft_s",
        "server_e2e_s",
        "server_queue_time_s",
    ):
        frame[c] = pd.to_numeric(frame[c], errors="coerce").astype(float)
    return frame.sort_values("send_time_unix", kind="stable").reset_index(drop=True)


def normalise_server(frame: pd.DataFrame) -> pd.DataFrame:
    if "time_unix" not in frame.columns and "t" in frame.columns:  # raw exporter JSON lines
        frame = frame.rename(columns={"t": "time_unix"})
    frame = _ensure(frame, SERVER_COLUMNS)
    frame["time_unix"] = pd.to_numeric(frame["time_unix"], errors="coerce").astype(float)
    frame["up"] = frame["up"].fillna(True).astype(bool)
    return frame.sort_values("time_unix", kind="stable").reset_index(drop=True)


def measured(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests that count: calibration probes (phase != "measure") are excluded."""
    if "phase" in requests.columns:
        return requests[requests["phase"].fillna("measure") == "measure"]
    return requests


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def load_bundle(directory: str | Path) -> Bundle:
    """Read run.json, requests.parquet and server.parquet (each optional) from a bundle folder."""
    d = Path(directory)
    run = _read_json(d / "run.json") or {}
    req = pd.read_parquet(d / "requests.parquet") if (d / "requests.parquet").exists() else pd.DataFrame()
    srv = pd.read_parquet(d / "server.parquet") if (d / "server.parquet").exists() else pd.DataFrame()
    extra: dict[str, Any] = {
        name: data for name in ("advice.json", "sweep.json") if (data := _read_json(d / name)) is not None
    }
    extra["client_log_warnings"] = client_log_warnings(d)
    return Bundle(run, normalise_requests(req), normalise_server(srv), d, extra)


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
