"""`kvscope run --serve CMD` against real processes: the bundled engine started from its command
line runs, is recorded and is gone afterwards; a command that exits, one that never becomes
healthy and one whose port is taken each end the run with exit 4 and leave nothing running;
Ctrl-C during the load stops the server kvscope started."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.run.commands import kvscope_command
from tests.support.paths import ROOT
from tests.support.prometheus import free_port
from tests.support.servers import kvscope_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _engine(port: int) -> str:
    return shlex.join(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "engine",
            "serve",
            "--model",
            "tiny-random",
            "--port",
            str(port),
        ]
    )


def _left_running(marker: str) -> list[str]:
    """Processes whose command line holds `marker` (a port no other test uses)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if marker in cmd and "pytest" not in cmd:
            found.append(cmd)
    return found


def _gone(marker: str, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _left_running(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not _left_running(marker)


def test_a_served_bundled_engine_runs_is_recorded_and_stopped(tmp_path: Path) -> None:
    port = free_port()
    rc, log, _ = kvscope_run(
        "--serve", _engine(port), "--workload", "chat", "--users", "2", "--duration", "6s",
        "--max-output-tokens", "8", "--no-advise", "--out", str(tmp_path / "b"),
    )  # fmt: skip
    assert rc == 0, log
    run = json.loads((tmp_path / "b" / "run.json").read_text())
    assert run["serve"]["engine"] == "bundled" and run["serve"]["port"] == port
    assert run["target"] == f"http://127.0.0.1:{port}" and run["commands"]["server"][-1] == str(port)
    assert "is healthy on" in log and _gone(f"--port {port}")


@pytest.mark.parametrize(
    "command, expected",
    [
        ("{python} -c 'import sys; sys.exit(3)' --port {port}", "exited with status 3 before it was healthy"),
        ("{python} -c 'import time; time.sleep(600)' --port {port}", "was not healthy on"),
    ],
)
def test_a_server_that_exits_or_never_answers_fails_with_exit_4_and_nothing_left(
    tmp_path: Path, command: str, expected: str
) -> None:
    port = free_port()
    serve = command.format(python=sys.executable, port=port)
    rc, log, seconds = kvscope_run(
        "--serve", serve, "--startup-timeout", "4", "--workload", "chat", "--out", str(tmp_path / "b")
    )
    assert rc == 4 and expected in log, log
    assert "kvscope run: exit 4 (target_unreachable): --serve: the server" in log
    assert seconds < 60 and _gone(f"--port {port}")


def test_a_port_already_held_fails_with_exit_4_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        rc, log, _ = kvscope_run("--serve", _engine(port), "--workload", "chat", "--out", str(tmp_path / "b"))
    assert rc == 4 and f"127.0.0.1:{port} is already in use" in log, log
    assert not (tmp_path / "b" / "logs" / "server.log").exists()  # never started


def test_ctrl_c_stops_the_server_kvscope_started(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "b"
    proc = subprocess.Popen(
        kvscope_command(
            "run", "--quiet", "--serve", _engine(port), "--workload", "chat", "--users", "2",
            "--duration", "120s", "--max-output-tokens", "8", "--no-advise", "--out", str(out),
        ),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    records = out / "raw" / "records.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if records.exists() and len(records.read_text().splitlines()) >= 3:
            break
        time.sleep(0.3)
    assert proc.poll() is None and _left_running(f"--port {port}"), proc.stdout.read()
    proc.send_signal(2)  # SIGINT, as Ctrl-C
    log, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, log
    assert _gone(f"--port {port}"), _left_running(f"--port {port}")
