"""The Azure LLM inference trace (Azure/AzurePublicDataset, 2023 and 2024 releases) as
trace entries: a CSV with the header `TIMESTAMP,ContextTokens,GeneratedTokens`.

TIMESTAMP is wall-clock time, e.g. `2023-11-16 18:15:46.6805900` (100 ns ticks; an offset
such as `+00:00` may follow); a time without an offset is read as UTC, and the trace is
re-based to its first request anyway. ContextTokens is the prompt length, GeneratedTokens
the output length. The trace carries no prompt text and no prefix structure, so replayed
prompts share nothing. A row that does not parse is an error naming its line: a silently
shortened trace would misstate the offered load.
"""

from __future__ import annotations

import csv
from datetime import datetime, timezone
from pathlib import Path

from harness.workload.trace_entry import TraceEntry

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _seconds(stamp: str) -> float:
    t = datetime.fromisoformat(stamp.strip())
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()


def azure_csv(path: str | Path, lines: list[str]) -> list[TraceEntry]:
    """The rows of an Azure trace CSV (`lines`, the file's lines); ValueError naming the file
    and line when the header lacks a column or a row does not parse."""
    rows = csv.reader(lines)
    header = [h.strip() for h in next(rows, [])]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ValueError(
            f"{path}: not a trace: neither JSON lines nor a CSV with {', '.join(COLUMNS)} "
            f"(missing {', '.join(missing)})"
        )
    at = [header.index(c) for c in COLUMNS]
    entries: list[TraceEntry] = []
    for number, row in enumerate(rows, 2):
        if not row or not "".join(row).strip():
            continue
        try:
            stamp, prompt, output = (row[i] for i in at)
            entries.append(TraceEntry(_seconds(stamp), max(1, int(prompt)), max(1, int(output))))
        except (ValueError, IndexError) as exc:
            raise ValueError(f"{path}:{number}: {exc}") from None
    return entries
