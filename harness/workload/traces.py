"""Request traces for the replay workload: arrival times and lengths, in the formats traces
come in. A file whose first data line starts with `{` is JSON lines; anything else is a CSV
with a header, read as the Azure LLM inference trace (`azure_trace`).

JSON lines (kvscope's own, and Mooncake's, which AIPerf and vLLM's benchmark also read): one
object a line. Recognised keys (the first present wins):
- arrival: `arrival_s` (seconds from trace start) or `timestamp` (milliseconds, as in
  Mooncake's traces); traces are re-based so the first arrival is at 0.
- prompt length: `prompt_tokens` or `input_length`; output length: `output_tokens` or
  `output_length`.
- optional `hash_ids` (Mooncake): ids of the prompt's blocks of MOONCAKE_BLOCK_TOKENS
  tokens, chained (equal ids at a position mean equal prompts up to there); the replay
  workload turns each id into the same block of text in every request that names it, so
  the trace's prefix reuse reaches the server's cache as it was recorded.
- optional `session_id` (a string or number) and `turn` (0-based): the request is a turn of
  that conversation. A session's turns are replayed in turn order (without `turn`: in arrival
  order), each sent only once the previous turn's answer is in, with the whole conversation
  so far (`harness.load.trace_sessions`); a turn whose time comes before its predecessor's
  is moved to its predecessor's time. Turn numbers must be distinct within a session.
Lines that are blank or start with `#` are skipped; a malformed line is an error that names
its line number (a silently shortened trace would misstate the offered load).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from harness.workload.azure_trace import azure_csv
from harness.workload.trace_entry import MOONCAKE_BLOCK_TOKENS, TraceEntry

__all__ = ["MOONCAKE_BLOCK_TOKENS", "TraceEntry", "load_trace", "parse_line", "trace_offsets"]


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
    session = obj.get("session_id")
    if isinstance(session, bool) or (session is not None and not isinstance(session, (str, int))):
        raise ValueError("session_id must be a string or an integer")
    turn = obj.get("turn")
    if turn is not None and (
        session is None or isinstance(turn, bool) or not isinstance(turn, int) or turn < 0
    ):
        raise ValueError("turn must be an integer >= 0, given with a session_id")
    return TraceEntry(
        float(arrival),
        max(1, int(prompt)),
        max(1, int(output)),
        hash_ids,
        None if session is None else str(session),
        turn,
    )


def _json_lines(path: str | Path, lines: list[str]) -> list[TraceEntry]:
    entries: list[TraceEntry] = []
    for number, line in enumerate(lines, 1):
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
    return entries


def load_trace(path: str | Path) -> list[TraceEntry]:
    """The trace in `path`, sorted by arrival and re-based to start at 0; ValueError naming
    the file (and line) when it cannot be read as a trace."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the trace ({exc})") from None
    first = next((line.strip() for line in lines if line.strip() and not line.startswith("#")), "")
    entries = _json_lines(path, lines) if first.startswith("{") or not first else azure_csv(path, lines)
    if not entries:
        raise ValueError(f"{path}: the trace is empty")
    entries = _sessions_in_order(path, entries)
    entries.sort(key=lambda e: (e.arrival_s, e.turn or 0))
    t0 = entries[0].arrival_s
    return [replace(e, arrival_s=e.arrival_s - t0) for e in entries]


def _sessions_in_order(path: str | Path, entries: list[TraceEntry]) -> list[TraceEntry]:
    """Number each session's turns 0, 1, ... in turn (else arrival) order, and move a turn
    that would arrive before its predecessor to its predecessor's time."""
    sessions: dict[str, list[TraceEntry]] = defaultdict(list)
    for entry in entries:
        if entry.session_id is not None:
            sessions[entry.session_id].append(entry)
    out = [e for e in entries if e.session_id is None]
    for session, turns in sessions.items():
        numbered = [t.turn for t in turns if t.turn is not None]
        if numbered and len(numbered) != len(turns):
            raise ValueError(f"{path}: session {session!r} numbers some of its turns, not all")
        if len(set(numbered)) != len(numbered):
            raise ValueError(f"{path}: session {session!r} has two turns with the same number")
        turns.sort(key=lambda t: (t.turn or 0, t.arrival_s))  # stable: file order breaks ties
        arrival = turns[0].arrival_s
        for index, turn in enumerate(turns):
            arrival = max(arrival, turn.arrival_s)
            out.append(replace(turn, arrival_s=arrival, turn=index))
    return out


def trace_offsets(entries: list[TraceEntry], time_scale: float = 1.0):
    """(offset, entry) pairs for `ArrivalSchedule`; time_scale 0.5 replays twice as fast."""
    return ((e.arrival_s * time_scale, e) for e in entries)
