"""Checks shared by the tests that kill a `kvscope run`'s target mid-run (the stand-in, the
real vLLM): how soon the run exited after the kill, how many failures it recorded after it,
and that none of the run's children outlived it. Stdlib and psutil only."""

from __future__ import annotations

import json
from pathlib import Path

import psutil


def failures_after(records: Path, kill_unix: float) -> int:
    """Failed requests that ended at or after the kill: those in flight then, and those sent
    after it (the raw records: every one the master got)."""
    rows = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    return sum(
        1
        for r in rows
        if not r.get("ok") and (r.get("send_time_unix") or 0) + (r.get("e2e_s") or 0) >= kill_unix
    )


def leftover_children(run_json: Path) -> list[str]:
    """Processes still running one of the command lines run.json says the run started."""
    commands = {tuple(argv) for argv in json.loads(run_json.read_text())["commands"].values()}
    left = []
    for proc in psutil.process_iter(["cmdline", "pid"]):
        cmdline = tuple(proc.info["cmdline"] or ())
        if cmdline in commands:
            left.append(f"{proc.info['pid']}: {' '.join(cmdline)}")
    return left
