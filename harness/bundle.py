"""Write a run's results bundle: requests.parquet, server.parquet, run.json, summary.json.

Inputs are the raw JSON-lines files the run produced (Locust master's records, the
exporter's samples), so a bundle can be rebuilt from `raw/` after the fact. The parquet
schemas are explicit (not inferred from the first rows): an empty or all-failed run still
has every column with its type, which is what downstream readers rely on.
"""

from __future__ import annotations

import json
import math
import platform
import sys
from dataclasses import fields
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from exporter.quantities import HISTOGRAMS, QUANTITIES
from harness.analysis.summary import write_summary
from harness.request_record import RequestRecord

_ARROW = {
    "str": pa.string(),
    "str | None": pa.string(),
    "float": pa.float64(),
    "int": pa.int64(),
    "int | None": pa.int64(),
    "bool": pa.bool_(),
    "list[float]": pa.list_(pa.float64()),
    "list[int]": pa.list_(pa.int64()),
}
REQUEST_SCHEMA = pa.schema([(f.name, _ARROW[str(f.type)]) for f in fields(RequestRecord)])
SERVER_FIXED = (
    ("time_unix", pa.float64()),
    ("target", pa.string()),
    ("up", pa.bool_()),
    ("dialect", pa.string()),
    ("model", pa.string()),
    ("instance", pa.string()),
    ("reason", pa.string()),
)


def read_jsonl(path: Path) -> list[dict]:
    rows: list[dict] = []
    if not path.exists():
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue  # a line cut by a kill mid-write; everything else stands
    return rows


def requests_table(records: list[dict]) -> pa.Table:
    cols = {name: [r.get(name) for r in records] for name in REQUEST_SCHEMA.names}
    for name in ("itl_s",):
        cols[name] = [list(v) if isinstance(v, list) else [] for v in cols[name]]
    return pa.table(cols, schema=REQUEST_SCHEMA)


def _flatten_sample(row: dict) -> dict[str, Any]:
    out: dict[str, Any] = {
        "time_unix": row.get("t"),
        "target": row.get("target"),
        "up": bool(row.get("up")),
        "dialect": row.get("dialect"),
        "model": row.get("model"),
        "instance": row.get("instance"),
        "reason": row.get("reason"),
    }
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
    for name, _ in SERVER_FIXED:
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


def _json_safe(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    return x


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(_json_safe(data), indent=2, allow_nan=False) + "\n", encoding="utf-8")


def write_bundle(
    out: Path, run_info: dict[str, Any], records_path: Path, exporter_dir: Path
) -> dict[str, Any]:
    """Write the four bundle files into `out`; returns the summary."""
    table = requests_table(read_jsonl(records_path))
    pq.write_table(table, out / "requests.parquet")
    server = server_frame(exporter_dir)
    server.to_parquet(out / "server.parquet", index=False)
    write_json(out / "run.json", {**run_info, "versions": versions()})
    return write_summary(out)
