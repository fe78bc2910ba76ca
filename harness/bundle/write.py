"""Write a run's results bundle: requests.parquet, server.parquet and run.json.

Inputs are the raw JSON-lines files the run produced (Locust master's records, the
exporter's samples), so a bundle can be rebuilt from `raw/` after the fact. The parquet
schemas are explicit (not inferred from the first rows): an empty or all-failed run still
has every column with its type, which is what downstream readers rely on.
"""

from __future__ import annotations

import json
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from exporter.quantities import HISTOGRAMS, QUANTITIES
from harness.bundle.jsonfile import read_jsonl, write_json
from harness.bundle.kv_events import write_kv_events
from harness.bundle.schema import REQUEST_SCHEMA, REQUESTS, RUN_JSON, SERVER, SERVER_FIXED
from harness.bundle.spans import write_spans


def requests_table(records: list[dict]) -> pa.Table:
    cols = {name: [r.get(name) for r in records] for name in REQUEST_SCHEMA.names}
    for name in ("itl_s",):
        cols[name] = [list(v) if isinstance(v, list) else [] for v in cols[name]]
    return pa.table(cols, schema=REQUEST_SCHEMA)


def _flatten_sample(row: dict) -> dict[str, Any]:
    out: dict[str, Any] = {name: row.get("t" if name == "time_unix" else name) for name in SERVER_FIXED.names}
    out["up"] = bool(out["up"])
    for key, value in row.items():
        if key in ("t", "histograms", "labels") or key in out:
            continue
        if value is None or isinstance(value, (bool, int, float, str)):
            out[key] = value
    hists = row.get("histograms") or {}
    for name in HISTOGRAMS:
        h = hists.get(name) or {}
        out[f"{name}_count"] = h.get("count")
        out[f"{name}_sum"] = h.get("sum")
    out["histograms_json"] = json.dumps(hists) if hists else None
    out["labels_json"] = json.dumps(row.get("labels")) if row.get("labels") else None
    return out


def server_frame(exporter_dir: Path) -> pd.DataFrame:
    rows = [_flatten_sample(r) for path in sorted(exporter_dir.glob("*.jsonl")) for r in read_jsonl(path)]
    df = pd.DataFrame(rows)
    for name in SERVER_FIXED.names:
        if name not in df.columns:
            df[name] = pd.Series(dtype="object")
    for name in QUANTITIES:
        df[name] = (
            pd.to_numeric(df[name], errors="coerce") if name in df.columns else pd.Series(dtype="float64")
        )
    return df.sort_values("time_unix", kind="stable").reset_index(drop=True) if len(df) else df


def versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for dist in ("kvscope", "locust", "pandas", "pyarrow", "aiohttp", "gevent", "geventhttpclient"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def write_bundle(out: Path, run_info: dict[str, Any], records_path: Path, exporter_dir: Path) -> None:
    """Write run.json, requests.parquet, server.parquet, (with KV events) kv_events.parquet
    and (when the run received spans) spans.parquet into `out` (summary.json is the
    analysis's: `harness.analysis.summary.write_summary`)."""
    requests = requests_table(read_jsonl(records_path))
    pq.write_table(requests, out / REQUESTS)
    server_frame(exporter_dir).to_parquet(out / SERVER, index=False)
    write_kv_events(out, exporter_dir)
    spans = write_spans(out, requests.to_pandas())
    if spans is not None:
        run_info = {**run_info, "spans": spans}
    write_json(out / RUN_JSON, {**run_info, "versions": versions()})
