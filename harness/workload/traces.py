"""Request traces for the replay workload: JSON lines of arrival times and lengths.

One object a line. Recognised keys (the first present wins):
- arrival: `arrival_s` (seconds from trace start) or `timestamp` (milliseconds, as in
  Mooncake's traces); traces are re-based so the first arrival is at 0.
- prompt length: `prompt_tokens` or `input_length`; output length: `output_tokens` or
  `output_length`.
- optional `hash_ids` (Mooncake): ids of the prompt's blocks; requests that share a leading
  hash id share that block of prompt text, so the trace's prefix reuse is reproduced.
Lines that are blank or start with `#` are skipped; a malformed line is an error that names
its line number (a silently shortened trace would misstate the offered load).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MOONCAKE_BLOCK_TOKENS = 512  # tokens per hash id in Mooncake's published traces


@dataclass(frozen=True, slots=True)
class TraceEntry:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


def _first(obj: dict, *keys: str):
    for key in keys:
        if key in obj and obj[key] is not None:
            return obj[key]
    return None


def parse_line(obj: dict) -> TraceEntry:
    arrival = _first(obj, "arrival_s")
    if arrival is None:
        ms = _first(obj, "timestamp")
        arrival = None if ms is None else float(ms) / 1000.0
    prompt = _first(obj, "prompt_tokens", "input_length")
    output = _first(obj, "output_tokens", "output_length")
    if arrival is None or prompt is None or output is None:
        raise ValueError("needs arrival_s|timestamp, prompt_tokens|input_length, output_tokens|output_length")
    hash_ids = tuple(int(h) for h in obj.get("hash_ids") or ())
    return TraceEntry(float(arrival), max(1, int(prompt)), max(1, int(output)), hash_ids)


def load_trace(path: str | Path) -> list[TraceEntry]:
    entries: list[TraceEntry] = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError("not a JSON object")
                entries.append(parse_line(obj))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: {exc}") from None
    if not entries:
        raise ValueError(f"{path}: the trace is empty")
    entries.sort(key=lambda e: e.arrival_s)
    t0 = entries[0].arrival_s
    return [TraceEntry(e.arrival_s - t0, e.prompt_tokens, e.output_tokens, e.hash_ids) for e in entries]


def trace_offsets(entries: list[TraceEntry], time_scale: float = 1.0):
    """(offset, entry) pairs for `ArrivalSchedule`; time_scale 0.5 replays twice as fast."""
    return ((e.arrival_s * time_scale, e) for e in entries)
