"""The live progress line of `kvscope run`, read from files the run is writing anyway.

Sources (all appended or atomically rewritten by other processes, so reading never blocks
them): the Locust master's records (JSON lines, flushed per batch of worker records), its
status file (users, workers), and the exporter's samples (JSON lines, one per scrape).
Rates and latency percentiles are over the last WINDOW_S seconds of completed requests
(warm-up requests are counted apart and enter none of them).

`update` reads what is new and is called by the run's watch loop whether or not a line is
shown: the run also learns from the records when the first request succeeded (KV events are
expected from then on) and how many requests failed on the connection itself (the target may be gone).
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from harness.formatting import ms

WINDOW_S = 10.0
# Failures of the connection itself: no answer, a stream that broke off, or silence past the
# request timeout. A server that is gone shows these; one that refuses (4xx, 5xx) does not.
CONNECTION_FAILURES = frozenset({"connect_error", "stream_error", "timeout"})


@dataclass(slots=True)
class JsonlTail:
    """Incremental reader: returns whole new lines since the last call (a partial last
    line is kept for next time)."""

    path: Path
    offset: int = 0
    partial: bytes = b""

    def new(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


def _pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    values = sorted(values)
    return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]


@dataclass(slots=True)
class Progress:
    records: JsonlTail
    status_path: Path
    exporter_dir: Path
    started: float = field(default_factory=time.time)
    window: deque = field(default_factory=deque)  # (end_unix, ttft_s, output_tokens, ok)
    ok: int = 0
    failed: int = 0
    tails: dict[str, JsonlTail] = field(default_factory=dict)
    kv_usage: float | None = None
    preemptions_first: float | None = None
    preemptions_last: float | None = None
    warmup_s: float = 0.0
    warmup: int = 0  # records of requests sent during the warm-up
    connection_failures: int = 0  # failed records, any phase, of a CONNECTION_FAILURES class
    first_ok_unix: float | None = None  # when the first successful record (any phase) was read
    last_line: str = ""
    _line_counts: tuple[int, int, int] = (0, 0, 0)  # (ok, failed, warmup) when last_line was made

    def _update_server(self) -> None:
        for path in sorted(self.exporter_dir.glob("*.jsonl")) if self.exporter_dir.is_dir() else []:
            tail = self.tails.setdefault(path.name, JsonlTail(path))
            for row in tail.new():
                if not row.get("up"):
                    continue
                if isinstance(row.get("kv_usage_ratio"), (int, float)):
                    self.kv_usage = float(row["kv_usage_ratio"])
                p = row.get("preemptions")
                if isinstance(p, (int, float)):
                    self.preemptions_first = p if self.preemptions_first is None else self.preemptions_first
                    self.preemptions_last = p

    def update(self, now: float | None = None) -> None:
        """Read the records that came in since the last call."""
        now = now or time.time()
        for r in self.records.new():
            phase = r.get("phase", "measure")
            if r.get("ok") and self.first_ok_unix is None:
                self.first_ok_unix = now
            if not r.get("ok") and r.get("error_class") in CONNECTION_FAILURES:
                self.connection_failures += 1
            self.warmup += phase == "warmup"
            if phase != "measure":
                continue
            self.ok += bool(r.get("ok"))
            self.failed += not r.get("ok")
            end = (r.get("send_time_unix") or now) + (r.get("e2e_s") or 0.0)
            ttft = r.get("ttft_s")
            self.window.append(
                (
                    end,
                    ttft if r.get("ok") and isinstance(ttft, float) else math.nan,
                    r.get("output_tokens") or 0,
                    bool(r.get("ok")),
                )
            )

    def line(self, now: float | None = None) -> str:
        now = now or time.time()
        self.update(now)
        while self.window and self.window[0][0] < now - WINDOW_S:
            self.window.popleft()
        self._update_server()
        try:
            status = json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            status = {}
        span = min(WINDOW_S, max(1e-9, now - self.started))
        oks = [w for w in self.window if w[3]]
        ttfts = [w[1] for w in oks if w[1] == w[1]]
        kv = "-" if self.kv_usage is None else f"{self.kv_usage:.0%}"
        pre = (
            "-"
            if self.preemptions_last is None
            else f"{self.preemptions_last - (self.preemptions_first or 0):.0f}"
        )
        warming = f" | warm-up {self.warmup}" if self.warmup_s else ""
        self.last_line = (
            f"[{now - self.started:5.0f}s] users {status.get('user_count', '-')} | "
            f"{len(oks) / span:5.1f} req/s | {sum(w[2] for w in oks) / span:7.1f} tok/s | "
            f"TTFT p50 {ms(_pct(ttfts, 0.5), unit='ms')} p99 {ms(_pct(ttfts, 0.99), unit='ms')}"
            f" | KV {kv} | preempted {pre} | ok {self.ok} failed {self.failed}{warming}"
        )
        self._line_counts = (self.ok, self.failed, self.warmup)
        return self.last_line

    def final_line(self, now: float | None = None) -> str | None:
        """The line once more at the end, or None when no record came in since it was last
        made (printing it again would only repeat it)."""
        made, before = bool(self.last_line), self._line_counts
        line = self.line(now)
        return None if made and self._line_counts == before else line
