"""How `kvscope run` ends, against servers that misbehave on purpose (the stand-in: a real
aiohttp SSE server whose faults are chosen per test): the exit status run.json records and
the console's last line states, and a second Ctrl-C that stops at once without losing a
record that reached the master."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from harness.results import load
from harness.run.commands import kvscope_command
from harness.run.procs import free_port, http_get, wait_http
from tests.support.servers import ROOT, STANDIN, kvscope_run, standin
from tests.support.target_loss import failures_after, leftover_children
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
SHORT = ("--workload", "long_context", "--prompt-tokens", "16", "--no-calibrate", "--no-advise")


def _last_line(log: str) -> str:
    return log.strip().splitlines()[-1]


def _counter(url: str, name: str) -> float:
    body = http_get(url + "/metrics", 5.0)[1].decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(name))


def _start(url, out, *args):
    return subprocess.Popen(
        kvscope_command("run", "--quiet", "--target", url, *SHORT, "--out", str(out), *args),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_records(out, proc, n: int) -> None:
    records = out / "raw" / "records.jsonl"

    def count() -> int:
        assert proc.poll() is None, f"the run exited with {proc.returncode}: {proc.stdout.read()}"
        return len(records.read_text().splitlines()) if records.exists() else 0

    wait_until(count, f"{n} records", 120, 0.2, ok=lambda got: got >= n)


def _console(proc) -> tuple[list[str], threading.Thread]:
    """The run's console lines, read on a thread as they come (so a test can wait on one)."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    return lines, reader


def test_a_target_killed_mid_run_exits_4_within_seconds_with_few_failures_after(tmp_path):
    """The users back off (harness.workload.backoff) and the run sees the target gone: it ends
    within 5 s of the kill, not at the planned end, with few failures recorded after it."""
    out, port = tmp_path / "b", free_port()
    target = subprocess.Popen([sys.executable, str(STANDIN), str(port), "ok", "0.02"], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_http(url + "/health", 30.0)[0]
        proc = _start(url, out, "--users", "4", "--duration", "60s", "--output-tokens", "10")
        _wait_for_records(out, proc, 20)
    finally:
        kill_unix, killed = time.time(), time.monotonic()
        target.kill()  # as a crashed server: no goodbye; the run goes on against nothing
        target.wait(10)
    log, _ = proc.communicate(timeout=200)
    exited_after = time.monotonic() - killed
    assert proc.returncode == 4, log
    assert exited_after < 5.0, (exited_after, log)
    after = failures_after(out / "raw" / "records.jsonl", kill_unix)
    assert 0 < after < 50, after
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "target_unreachable" and run["exit"]["code"] == 4
    lost = run["target_lost"]
    assert lost["code"] == "target_lost" and kill_unix - 1 < lost["at_unix"] < kill_unix + 4
    assert "error: the target stopped answering" in log
    assert _last_line(log).startswith(
        "kvscope run: exit 4 (target_unreachable): the target stopped answering"
    )
    # The loss is recorded as what the users met: connections refused, or streams cut by the
    # kill (a suite run saw only 3 cut streams: the run had stopped before any user reconnected)
    errors = load(out).summary["errors"]["by_class"]
    assert errors.get("connect_error", 0) + errors.get("stream_error", 0) > 0, errors
    assert leftover_children(out / "run.json") == []


def test_a_target_failing_half_the_requests_exits_3(tmp_path):
    with standin(tmp_path, "half_500") as url:
        rc, log, _ = kvscope_run(
            "--target", url, *SHORT, "--users", "2", "--duration", "3s", "--output-tokens", "4",
            "--out", str(tmp_path / "b"),
        )  # fmt: skip
        assert rc == 3, log
        run = json.loads((tmp_path / "b" / "run.json").read_text())
        assert run["status"] == "errors" and run["exit"]["code"] == 3
        assert run["exit"]["reason"]["code"] == "error_rate_over_limit"
        assert load(tmp_path / "b").summary["errors"]["by_class"]["http_5xx"] > 0
        assert _last_line(log).startswith("kvscope run: exit 3 (errors):")
        # Allowed more errors, the same server's run completes.
        rc, log, _ = kvscope_run(
            "--target", url, *SHORT, "--users", "2", "--duration", "3s", "--output-tokens", "4",
            "--max-error-rate", "60%", "--out", str(tmp_path / "c"),
        )  # fmt: skip
    assert rc == 0 and _last_line(log).startswith("kvscope run: exit 0 (completed)"), log
    assert json.loads((tmp_path / "c" / "run.json").read_text())["exit"]["status"] == "completed"
    # --no-advise: the report, without the advisor and its replays.
    assert (tmp_path / "c" / "report.html").exists() and not (tmp_path / "c" / "advice.json").exists()
    assert "no advice: --no-advise" in log


def test_a_second_ctrl_c_stops_at_once_and_keeps_every_record(tmp_path):
    out = tmp_path / "b"
    with standin(tmp_path, "ok", gap_s=0.05) as url:
        # 8 streams of 40 tokens 50 ms apart: 2 s each, so requests are always in flight.
        proc = _start(
            url, out, "--users", "8", "--duration", "60s", "--output-tokens", "40", "--length-spread", "0"
        )
        _wait_for_records(out, proc, 8)
        console, reader = _console(proc)
        proc.send_signal(signal.SIGINT)
        wait_until(
            lambda: any("interrupted: stopping" in line for line in console), "the run taking the Ctrl-C"
        )
        drained_from = _counter(url, "vllm:request_success")
        wait_until(
            lambda: _counter(url, "vllm:request_success"),
            "a request finishing during the drain",
            ok=lambda served: served > drained_from,
        )
        second = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        exited_after = time.monotonic() - second
        reader.join(10)
        log = "".join(console)
        received, served = _counter(url, "standin_requests_received"), _counter(url, "vllm:request_success")
    assert proc.returncode == 130, log
    # Today's figure was 15 s; the children are gone within ABORT_GRACE_S (1.5 s), and the
    # bundle (parquet, summary) is written after that.
    assert exited_after < 8.0, (exited_after, log)
    r = load(out)
    (note,) = [n for n in r.run["notes"] if n["code"] == "stopped_at_once"]
    assert float(note["text"].split("gone ")[1].split(" s")[0]) <= 2.0, note  # the figure it states
    # Every request the server received has a record; those it finished are recorded as ok,
    # those cut short as aborted.
    assert len(r.requests) == received and int(r.requests["ok"].sum()) == served, (received, served)
    assert set(r.requests.loc[~r.requests["ok"], "error_class"]) <= {"aborted"}
    assert r.run["exit"]["code"] == 130 and r.run["exit"]["reason"]["code"] == "interrupted"


def test_requests_a_timed_out_drain_cuts_are_recorded_as_aborted(tmp_path):
    """Streams of 8 s, a 1 s drain: the requests in flight at the end are ended by the drain,
    and each has a record ("aborted"), so every request the server received is in the bundle
    (they were lost when the worker's users were left to Locust's stop, after the worker had
    acknowledged the drain and the master had gone)."""
    with standin(tmp_path, "ok", gap_s=0.1) as url:
        rc, log, _ = kvscope_run(
            "--target", url, *SHORT, "--users", "4", "--spawn-rate", "100", "--duration", "3s",
            "--output-tokens", "80", "--drain-timeout", "1", "--out", str(tmp_path / "b"),
        )  # fmt: skip
        received = _counter(url, "standin_requests_received")
    r = load(tmp_path / "b")
    aborted = r.requests[r.requests["error_class"] == "aborted"]
    assert len(r.requests) == received and len(aborted) == 4, (received, r.requests["error_class"])
    assert (~r.requests["ok"]).sum() == len(aborted)
    assert rc == 3 and "aborted 4" in _last_line(log), log
