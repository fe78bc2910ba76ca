"""The bundle's JSON files (run.json, summary.json, advice.json, sweep.json): strict JSON
out, one JSON object in; and the JSON-lines files of `raw/` in.

Invariant: what is written is standard JSON (`allow_nan=False`): NaN and inf become null,
numpy scalars plain numbers, tuples lists, objects with `to_dict` their dict, so any JSON
reader takes the files and "not measured" never reads as a number.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from harness.bundle.errors import BundleError


def json_safe(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if hasattr(x, "to_dict"):
        return json_safe(x.to_dict())
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):  # numpy scalars
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_json(path: Path, data: Any) -> Path:
    """Write atomically (a temporary file, then a rename): a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; BundleError (naming the file) when it cannot be read, is
    not JSON, or holds something other than an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise BundleError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BundleError(f"{path} must hold a JSON object")
    return data


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
