"""Real runs for the analysis, report and sweep tests: the bundled engine (real model code or
its simulator) on a free loopback port, and `kvscope run` / `kvscope sweep` as subprocesses.

The engine is started with `kvscope engine serve` when the CLI has it; until that command is
wired into `kvscope engine`, the same server is started through its own module
(`reference_engine.server.serve_cli`), which is what the command will call.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.run.procs import free_port
from tests.support.servers import ROOT, server


def serve_argv(port: int, *flags: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness.cli",
        "engine",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *flags,
    ]


@contextmanager
def engine(log_dir: Path, *flags: str, timeout_s: float = 180.0) -> Iterator[str]:
    """The bundled engine with `flags` (e.g. --model tiny-random --num-blocks 40); yields its URL."""
    port = free_port()
    with server(serve_argv(port, *flags), port, "/health", timeout_s, log_dir / f"engine-{port}.log") as url:
        yield url


def kvscope(*args: str, timeout_s: float = 300.0) -> tuple[int, str, float]:
    """(exit status, stdout+stderr, seconds) of `kvscope ARGS`."""
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
    )
    return out.returncode, out.stdout + out.stderr, time.monotonic() - start
