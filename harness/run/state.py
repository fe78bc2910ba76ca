"""One run in progress: its configuration, children, ports, notes and Ctrl-C count, and the
paths it writes under its bundle folder (`raw/` is what the children write; the bundle is
built from it at the end)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bundle.deployment import DeploymentFacts
from harness.bundle.finding import Finding
from harness.run import procs
from harness.run.config import RunConfig
from harness.run.kv_watch import KvEventsWatch
from harness.run.serve import ServeCommand


class RunFailed(Exception):
    """The run cannot go on; `code` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class Run:
    cfg: RunConfig
    children: dict[str, procs.Child] = field(default_factory=dict)
    interrupts: int = 0
    target_url: str = ""
    exporter_url: str | None = None
    exporter_ok: bool | None = None  # None: not confirmed yet
    master_port: int = 0
    notes: list[Finding] = field(default_factory=list)  # run.json notes
    models: list[dict] = field(default_factory=list)
    stated: DeploymentFacts | None = None  # what a --target stated at the start (server_facts)
    kv_events: list[str] = field(default_factory=list)  # the exporter's --kv-events values
    started_unix: float = field(default_factory=time.time)
    target_answers: bool = True  # False: the target no longer answered after the load
    aborted_at: float | None = None  # monotonic time of the second Ctrl-C (stop at once)
    otlp_endpoint: str | None = None  # the span receiver's URL, once it listens (`run.otlp`)
    kv_watch: KvEventsWatch | None = None  # with --kv-events: silence watch, notes (`run.kv_watch`)
    kv_events_status: dict | None = None  # run.json's kv_events, read from the exporter at the end
    target_lost: dict | None = None  # run.json's target_lost: when and why it stopped answering
    serve: ServeCommand | None = None  # the server this run started (`run.serve`); None: a --target

    @property
    def paths(self) -> dict[str, Path]:
        out = self.cfg.out
        return {
            "logs": out / "logs",
            "raw": out / "raw",
            "records": out / "raw" / "records.jsonl",
            "status": out / "raw" / "locust_status.json",
            "exporter": out / "raw" / "exporter",
            "csv": out / "locust" / "locust",
        }

    def say(self, message: str) -> None:
        print(f"kvscope run: {message}", file=sys.stderr, flush=True)

    def on_sigint(self, signum: int, frame: Any) -> None:
        self.interrupts += 1
        self.say(
            "interrupted: stopping the load test and writing the bundle (Ctrl-C again to stop at once)"
            if self.interrupts == 1
            else "stopping at once: in-flight requests are recorded as aborted"
        )
