"""`kv_events.parquet`: the block-level series of a run recorded with `--kv-events`.

One row per exporter tick and (target, instance, medium), from the exporter's
`raw/exporter/kv_events/<target>.jsonl` (exporter.kv_events.record). Scalars are columns
(counters cumulative since the subscriber started); each point of the miss-ratio curve is
four columns named by its pool increase in percent (`avoidable_blocks_p50` is +50 %), and the
nested parts (hot chains, the sparse reuse-distance histogram, the stream's counters) are
JSON text. A run without KV events has no such file; `read_kv_events` then returns None.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from exporter.kv_events.curve import POOL_INCREASES
from exporter.kv_events.record import SUBDIR
from harness.bundle.jsonfile import read_jsonl

KV_EVENTS = "kv_events.parquet"
SCALARS = (
    "target",
    "instance",
    "medium",
    "cached_blocks",
    "stored_blocks",
    "removed_blocks",
    "first_stores",
    "capacity_misses",
    "duplicate_stores",
    "unknown_removes",
    "overflow",
    "block_size",
    "pool_blocks",
    "pool_from",
    "stored_per_second",
    "removed_per_second",
    "capacity_misses_per_second",
    "hit_ratio",
    "shared_blocks",
    "fleet_shared_blocks",
)
CURVE_FIELDS = ("extra_blocks", "avoidable_blocks", "hit_ratio", "saved_prefill_tokens_per_second")


def increase_tag(increase: float) -> str:
    return f"p{round(increase * 100)}"


def curve_column(field: str, increase: float) -> str:
    """`hit_ratio` of +100 % is `projected_hit_ratio_p100`, the others keep their names."""
    name = "projected_hit_ratio" if field == "hit_ratio" else field
    return f"{name}_{increase_tag(increase)}"


def _row(line: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"time_unix": line.get("t"), **{k: line.get(k) for k in SCALARS}}
    points = {p.get("increase"): p for p in line.get("curve") or []}
    for inc in POOL_INCREASES:
        p = points.get(inc, {})
        for f in CURVE_FIELDS:
            row[curve_column(f, inc)] = p.get(f)
    row["hot_chains_json"] = json.dumps(line.get("hot_chains") or [])
    row["distances_json"] = json.dumps(line.get("distances") or {})
    row["stream_json"] = json.dumps(line.get("stream") or {})
    return row


def kv_events_frame(exporter_dir: Path) -> pd.DataFrame:
    rows = [_row(r) for path in sorted((exporter_dir / SUBDIR).glob("*.jsonl")) for r in read_jsonl(path)]
    df = pd.DataFrame(rows)
    return df.sort_values("time_unix", kind="stable").reset_index(drop=True) if len(df) else df


def write_kv_events(out: Path, exporter_dir: Path) -> bool:
    """Write kv_events.parquet when the run recorded KV events; True if it did."""
    df = kv_events_frame(exporter_dir)
    if df.empty:
        return False
    df.to_parquet(out / KV_EVENTS, index=False)
    return True


def has_kv_events(directory: Path | None) -> bool:
    return directory is not None and (Path(directory) / KV_EVENTS).exists()


def read_kv_events(directory: Path | None) -> pd.DataFrame | None:
    """The bundle's KV event series, or None (no file, or a bundle built in memory)."""
    if not has_kv_events(directory):
        return None
    return pd.read_parquet(Path(directory) / KV_EVENTS)


def latest(frame: pd.DataFrame, medium: str = "GPU") -> pd.DataFrame:
    """The last row of each (target, instance) of one medium: the run's cumulative totals."""
    rows = frame[frame["medium"] == medium]
    return rows.groupby(["target", "instance"], sort=True).tail(1).reset_index(drop=True)
