"""Real runs for the analysis, report and sweep tests: the bundled engine (real model code or
its simulator) on a free loopback port, and `kvscope run` / `kvscope sweep` as subprocesses,
started with the command lines `kvscope run` itself uses (`harness.run.commands`).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.run.commands import engine_command, kvscope_command
from harness.run.procs import free_port
from tests.support.servers import ROOT, server


@contextmanager
def engine(log_dir: Path, *flags: str, timeout_s: float = 180.0) -> Iterator[str]:
    """The bundled engine with `flags` (e.g. --model tiny-random --num-blocks 40); yields its URL."""
    port = free_port()
    argv = engine_command(None, list(flags), port)
    with server(argv, port, "/health", timeout_s, log_dir / f"engine-{port}.log") as url:
        yield url


def kvscope(*args: str, timeout_s: float = 300.0) -> tuple[int, str, float]:
    """(exit status, stdout+stderr, seconds) of `kvscope ARGS`."""
    start = time.monotonic()
    out = subprocess.run(
        kvscope_command(*args),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=ROOT,
    )
    return out.returncode, out.stdout + out.stderr, time.monotonic() - start
