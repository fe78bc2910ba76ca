"""Is the target still there? Asked at the start (a target that never answers stops the run
before Locust starts), after the load, and during it whenever requests fail on the
connection itself.

During the run the watch loop hands `TargetWatch.check` the count of such failures from the
records; each new failure (at most one probe per PROBE_EVERY_S) probes the server's
/health and /v1/models. No HTTP answer from either means the target is lost: the run then
stops the load at once, instead of letting users fail request after request until the
planned end (the users back off meanwhile: `harness.workload.backoff`). A bundled engine whose
process exited is lost without a probe.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from harness.bundle.finding import Finding
from harness.run import procs
from harness.run.state import Run

PROBE_EVERY_S = 1.0
PROBE_TIMEOUT_S = 2.0  # per path; a killed server refuses at once, a hung one costs two of these
LOST_CODE = "target_lost"  # the run exit reason's code too


def reach(url: str, timeout_s: float) -> str | None:
    """None when the server at `url` gives any HTTP answer (on /health or /v1/models: a 401
    or 404 is an answer), else the reason it did not."""
    reason = b""
    for path in ("/health", "/v1/models"):
        status, reason = procs.http_get(url + path, timeout_s)
        if status:
            return None
    return reason.decode(errors="replace")


@dataclass(slots=True)
class TargetLost:
    at_unix: float
    reason: str
    failures_before: int  # connection failures recorded when it was found lost

    def to_json(self, started_unix: float) -> dict:
        return {
            "code": LOST_CODE,
            "at_unix": self.at_unix,
            "after_s": round(self.at_unix - started_unix, 3),
            "reason": self.reason,
            "connection_failures_before": self.failures_before,
            "text": self.text(started_unix),
        }

    def text(self, started_unix: float) -> str:
        return (
            f"the target stopped answering {self.at_unix - started_unix:.1f} s into the run "
            f"({self.reason}) after {self.failures_before} request(s) failed on the connection; "
            "the load was stopped"
        )


@dataclass(slots=True)
class TargetWatch:
    url: str
    seen: int = 0  # connection failures already looked into
    last_probe: float = -math.inf  # monotonic
    lost: TargetLost | None = None

    def check(self, connection_failures: int, now: float, engine_exited: str | None = None) -> bool:
        """True once, when the target is found lost (`engine_exited`: why the bundled
        engine's process is gone, when it is)."""
        if self.lost is not None:
            return False
        if engine_exited is not None:
            self.lost = TargetLost(time.time(), engine_exited, connection_failures)
            return True
        if connection_failures <= self.seen or now - self.last_probe < PROBE_EVERY_S:
            return False
        self.seen, self.last_probe = connection_failures, now
        reason = reach(self.url, PROBE_TIMEOUT_S)
        if reason is None:
            return False
        self.lost = TargetLost(time.time(), reason, connection_failures)
        return True


def record_lost_target(run: Run, lost: TargetLost) -> None:
    run.target_lost = lost.to_json(run.started_unix)
    run.target_answers = False
    run.notes.append(Finding("target_lost", lost.text(run.started_unix)))
    run.say(f"error: {run.notes[-1].text}")


def engine_exited(run: Run) -> str | None:
    """Why the bundled engine is gone, or None while it runs (or with a --target)."""
    engine = run.children.get("engine")
    if engine is None or engine.running:
        return None
    return f"the engine exited with status {engine.returncode}"
