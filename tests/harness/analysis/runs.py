"""Real runs for the analysis, report and sweep tests: the bundled engine (real model code or
its simulator) on a free loopback port, and `kvscope run` / `kvscope sweep` as subprocesses,
started with the command lines `kvscope run` itself uses (`harness.run.commands`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
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


def kvscope(*args: str, timeout_s: float = 300.0, stall_workers: bool = False) -> tuple[int, str, float]:
    """(exit status, stdout+stderr, seconds) of `kvscope ARGS`. `stall_workers`: the run's Locust
    workers are stopped for 0.2 s of every 0.4 s (SIGSTOP / SIGCONT) while it runs, a client
    that reads its streams late whatever the machine's speed."""
    start = time.monotonic()
    proc = subprocess.Popen(
        kvscope_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    done = threading.Event()
    staller = threading.Thread(target=_stall_workers, args=(proc.pid, done), daemon=True)
    if stall_workers:
        staller.start()
    try:
        out, err = proc.communicate(timeout=timeout_s)
    finally:
        done.set()
        if stall_workers:
            staller.join()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out + err, time.monotonic() - start


def _children(pid: int, marker: str) -> list[int]:
    """Child processes of `pid` whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == pid and marker in cmdline:
            found.append(int(entry.name))
    return found


def _stall_workers(pid: int, done: threading.Event) -> None:
    while not done.is_set():
        workers = _children(pid, " --worker")
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGSTOP)
        done.wait(0.2)
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGCONT)
        done.wait(0.2)
