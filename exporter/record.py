"""`--record DIR`: one JSON-lines file per target, one line per normalised sample.

Lines are appended (never rewritten) and flushed after every scrape, so a harness can tail
the files while the run is going and a crash loses at most one scrape. An up scrape writes
one line per engine instance (`EngineSample.to_dict()` plus `t`, `target`, `up`, `dialect`
and the windowed values); a failed scrape writes one line with `up: false` and the reason.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import IO, Any

from exporter.quantities import Key
from exporter.series import Point

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def file_name(target: str) -> str:
    """File-system-safe, stable name for a target's JSON-lines file."""
    return (_UNSAFE.sub("_", target).strip("._") or "target") + ".jsonl"


class Recorder:
    """Owns the open files; `close()` once at shutdown."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[str]] = {}

    def path(self, target: str) -> Path:
        return self.directory / file_name(target)

    def write(
        self, target: str, point: Point, dialect: str | None, derived: dict[Key, dict[str, Any]]
    ) -> None:
        f = self._files.get(target)
        if f is None:
            f = self._files[target] = open(self.path(target), "a", encoding="utf-8")  # noqa: SIM115
        if not point.up:
            f.write(json.dumps({"t": point.t, "target": target, "up": False, "reason": point.reason}) + "\n")
        for key, sample in point.instances.items():
            row = {
                "t": point.t,
                "target": target,
                "up": True,
                "dialect": dialect,
                **sample.to_dict(),
                **derived.get(key, {}),
            }
            f.write(json.dumps(row, allow_nan=False, default=str) + "\n")
        f.flush()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
