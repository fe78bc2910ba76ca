"""Helpers for the harness tests: start servers on free loopback ports, read counters and
Locust's CSVs, run `kvscope run` as a subprocess (as a user would)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.run.commands import engine_command, kvscope_command
from harness.run.procs import free_port, http_get, wait_http
from tests.support.paths import ROOT
from tests.support.prometheus import stop_process

STANDIN = Path(__file__).resolve().parent / "standin.py"


@contextmanager
def server(argv: list[str], port: int, health: str, timeout_s: float, log: Path) -> Iterator[str]:
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        ok, reason = wait_http(f"http://127.0.0.1:{port}{health}", timeout_s)
        if not ok:
            raise RuntimeError(f"server did not start ({reason}): {log.read_text(errors='replace')[-2000:]}")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc, 20)


@contextmanager
def engine(tmp: Path, *flags: str) -> Iterator[str]:
    port = free_port()
    argv = engine_command("tiny-random", list(flags), port)
    with server(argv, port, "/health", 180.0, tmp / "engine.log") as url:
        yield url


@contextmanager
def standin(tmp: Path, mode: str, gap_s: float = 0.005) -> Iterator[str]:
    port = free_port()
    with server(
        [sys.executable, str(STANDIN), str(port), mode, str(gap_s)],
        port,
        "/health",
        30.0,
        tmp / f"standin-{mode}.log",
    ) as url:
        yield url


@contextmanager
def http_faults(tmp: Path, mode: str) -> Iterator[str]:
    """tests/support/http_faults.py in MODE (ok, stale, hang, drop) on a free port."""
    port = free_port()
    argv = [sys.executable, "-m", "tests.support.http_faults", str(port), mode]
    with server(argv, port, "/health", 30.0, tmp / f"faults-{mode}.log") as url:
        yield url


def finished_requests(url: str) -> float:
    """Sum of vllm:request_success_total over its label sets, from the server's /metrics."""
    status, body = http_get(url + "/metrics", 10.0)
    assert status == 200, body
    total = 0.0
    for line in body.decode().splitlines():
        m = re.match(r"^vllm:request_success_total(\{[^}]*\})?\s+([0-9.eE+-]+)", line)
        if m:
            total += float(m.group(2))
    return total


def locust_requests(stats_json: Path) -> tuple[int, int]:
    """(requests, failures) over Locust's E2E entries (its final --json-file): each request
    is counted exactly once there."""
    rows = [r for r in json.loads(stats_json.read_text()) if r["name"].startswith("E2E ")]
    return sum(r["num_requests"] for r in rows), sum(r["num_failures"] for r in rows)


def kvscope_run(*args: str, timeout_s: float = 240.0) -> tuple[int, str, float]:
    """(exit status, stderr+stdout, seconds) of `kvscope run ARGS`."""
    start = time.monotonic()
    out = subprocess.run(
        kvscope_command("run", "--quiet", *args),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
    )
    return out.returncode, out.stdout + out.stderr, time.monotonic() - start
