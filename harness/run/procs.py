"""Child processes of a run (engine, exporter, Locust master and workers) and their logs.

Every child starts in its own session (process group), so a Ctrl-C in the terminal reaches
only `kvscope run`, which then stops the children in order — Locust first (so it can drain
and write its last records), then the exporter (after a final scrape), then the engine.
A child whose group got the terminal's SIGINT directly would die mid-write instead.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass(slots=True)
class Child:
    name: str
    argv: list[str]
    popen: subprocess.Popen
    log_path: Path
    _log: IO[bytes]

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def send_signal(self, sig: int) -> None:
        if self.running:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> int | None:
        """`sig`, then SIGKILL after `timeout_s`; returns the exit status."""
        if self.running:
            self.send_signal(sig)
            if self.wait(timeout_s) is None:
                self.send_signal(signal.SIGKILL)
                self.wait(5.0)
        self._log.close()
        return self.returncode

    def reap_group(self) -> None:
        """SIGKILL whatever is left of the child's process group once the child itself has
        exited: a server's own children (vLLM's engine core) may outlive it for a moment. The
        group is the child's alone (it started its own session)."""
        if self.running:
            return
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def start(
    name: str, argv: Sequence[str], log_dir: Path, env: dict[str, str] | None = None, cwd: str | None = None
) -> Child:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    log = open(log_path, "ab")  # noqa: SIM115 (closed by Child.stop)
    popen = subprocess.Popen(
        list(argv),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
        cwd=cwd,
    )
    return Child(name, list(argv), popen, log_path, log)


def http_get(url: str, timeout_s: float) -> tuple[int, bytes]:
    """(status, body); status 0 with the reason as body when there was no HTTP answer."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (loopback/user URL)
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() or b""
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return 0, str(reason).encode()


def wait_http(
    url: str, timeout_s: float, child: Child | None = None, ok=lambda status: status == 200
) -> tuple[bool, str]:
    """Poll `url` until `ok(status)`, the deadline, or `child` exiting. Returns (ok, last reason)."""
    deadline = time.monotonic() + timeout_s
    reason = "not tried"
    while time.monotonic() < deadline:
        if child is not None and not child.running:
            return False, f"{child.name} exited with status {child.returncode}"
        status, text = http_get(url, timeout_s=min(2.0, max(0.1, deadline - time.monotonic())))
        if ok(status):
            return True, ""
        reason = f"HTTP {status}" if status else text.decode(errors="replace")
        time.sleep(0.2)
    return False, reason
