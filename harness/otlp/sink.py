"""Where received spans go: classified, de-duplicated, counted by reason, appended to a
JSON-lines file. Thread-safe (the HTTP server handles bodies on several threads).

Invariants:
- Memory is bounded: at most `max_spans` span keys are remembered (for de-duplication);
  spans past that are counted as `spans_over_cap` and dropped, never kept.
- Every span of an accepted body lands in exactly one count: kept, other (not a request
  span), duplicate (same trace and span id seen before: an exporter's retry), late (after
  `close()`: the run's grace period was over) or over_cap.
- A body that is refused lands in exactly one body count, and none of its spans is kept.
- Nothing here raises on bad input: a refused body is a count, not an exception.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import IO

from harness.otlp.formats import RawSpan, classify

BODY_REASONS = ("malformed", "oversized", "gzip_bomb", "unsupported_media", "busy", "not_found")
SPAN_REASONS = ("kept", "other", "duplicate", "late", "over_cap")
DEFAULT_MAX_SPANS = 500_000
# The receiver's output folder (`harness.otlp.serve`): spans as they come, its URL once it
# listens, the counts when it exits.
SPANS_FILE = "spans.jsonl"
ENDPOINT_FILE = "endpoint.json"
COUNTS_FILE = "counts.json"


class SpanSink:
    def __init__(self, path: Path, max_spans: int = DEFAULT_MAX_SPANS) -> None:
        self.max_spans = max_spans
        self._lock = threading.Lock()
        self._seen: set[tuple[str, str]] = set()
        self._closed = False
        self._file: IO[str] = open(path, "a", encoding="utf-8")
        self.counts: dict[str, int] = {
            "bodies": 0,
            "request_spans": 0,  # of spans_kept, those describing a request (the join's)
            **{f"bodies_{r}": 0 for r in BODY_REASONS},
            **{f"spans_{r}": 0 for r in SPAN_REASONS},
        }

    def refuse(self, reason: str) -> None:
        with self._lock:
            self.counts["bodies"] += 1
            self.counts[f"bodies_{reason}"] += 1

    def close(self) -> None:
        """The run's grace period is over: spans from now on are counted late, not kept."""
        with self._lock:
            self._closed = True

    def add(self, spans: list[RawSpan]) -> None:
        now = time.time()
        lines = []
        with self._lock:
            self.counts["bodies"] += 1
            for raw in spans:
                span = classify(raw)
                if span is None:
                    self._count("other")
                    continue
                key = (span.trace_id, span.span_id)
                if key in self._seen:
                    self._count("duplicate")
                elif self._closed:
                    self._count("late")
                elif len(self._seen) >= self.max_spans:
                    self._count("over_cap")
                else:
                    self._seen.add(key)
                    self._count("kept")
                    if span.role == "request":
                        self.counts["request_spans"] += 1
                    span.received_unix = now
                    lines.append(json.dumps(_plain(span.to_dict())))
            if lines:
                self._file.write("\n".join(lines) + "\n")
                self._file.flush()

    def _count(self, reason: str) -> None:
        self.counts[f"spans_{reason}"] += 1

    def snapshot(self) -> dict[str, int | bool]:
        with self._lock:
            return {**self.counts, "closed": self._closed}

    def shutdown(self) -> None:
        with self._lock:
            self._file.close()


def _plain(row: dict) -> dict:
    """NaN as null: JSON has no NaN, and the bundle reads null as missing."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
