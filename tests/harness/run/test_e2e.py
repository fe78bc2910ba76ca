"""`kvscope run` and the locustfiles end to end against the real bundled engine (tiny-random,
CPU, loopback): the bundle is complete, and Locust, the records and the server's own
finished-request counter agree request for request."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from harness.results import load
from harness.run.commands import kvscope_command
from tests.harness.bundle.findings_check import assert_coded
from tests.support.servers import (
    ROOT,
    engine,
    finished_requests,
    kvscope_run,
    locust_requests,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def engine_url(tmp_path_factory):
    with engine(tmp_path_factory.mktemp("engine"), "--num-blocks", "256") as url:
        yield url


def _check_bundle(out, engine_url, before: float):
    r = load(out)
    assert set(r.summary) >= {"headline", "client", "server"} and r.run["status"] == "completed"
    assert "completed" in assert_coded(out)  # every finding in its JSON has a registered code
    locust_total, locust_failed = locust_requests(out / "locust" / "stats.json")
    after = finished_requests(engine_url)
    assert locust_total == len(r.requests) == after - before, (locust_total, len(r.requests), after - before)
    assert locust_failed == 0 and r.requests["ok"].all()
    assert r.requests["request_id"].is_unique
    ok = r.measured
    assert len(ok) > 5 and (ok["usage_source"] == "server").all()
    assert ok["server_ttft_s"].notna().all()
    # The client's TTFT contains the server's (plus network and client): never less.
    assert (ok["ttft_s"] >= ok["server_ttft_s"]).all(), (ok["ttft_s"] - ok["server_ttft_s"]).min()
    assert all(len(g) == n - 1 for g, n in zip(ok["itl_s"], ok["num_chunks"]))
    assert len(r.server) >= 3 and r.server["kv_usage_ratio"].notna().any()
    return r


def test_run_end_to_end_bundle_counts_and_ttft(engine_url, tmp_path):
    before = finished_requests(engine_url)
    rc, log, _ = kvscope_run(
        "--target",
        engine_url,
        "--workload",
        "shared_prefix",
        "--users",
        "4",
        "--duration",
        "15s",
        "--workers",
        "1",
        "--prefix-tokens",
        "96",
        "--suffix-tokens",
        "16",
        "--output-tokens",
        "16",
        "--out",
        str(tmp_path / "b"),
    )
    assert rc == 0, log
    r = _check_bundle(tmp_path / "b", engine_url, before)
    assert (r.requests["phase"] == "calibration").sum() == 2
    assert r.summary["server"]["prefix_hit_ratio"] > 0.3  # 4 shared prefixes of ~96 tokens
    assert r.summary["headline"]["req_per_s"] > 0 and r.summary["headline"]["ttft_p99_s"] > 0


def test_two_workers_open_loop_nothing_lost_or_duplicated(engine_url, tmp_path):
    before = finished_requests(engine_url)
    rc, log, _ = kvscope_run(
        "--target",
        engine_url,
        "--workload",
        "rate",
        "--rate",
        "6",
        "--users",
        "16",
        "--duration",
        "8s",
        "--workers",
        "2",
        "--prompt-tokens",
        "64",
        "--output-tokens",
        "8",
        "--out",
        str(tmp_path / "b"),
    )
    assert rc == 0, log
    r = _check_bundle(tmp_path / "b", engine_url, before)
    per_worker = r.requests.groupby("worker_id").size()
    assert len(per_worker) == 2 and (per_worker > 3).all(), per_worker
    m = r.measured
    assert m["schedule_lag_s"].notna().all() and (m["schedule_lag_s"] > -0.01).all()
    # The two workers' shares interleave into one schedule at ~6 requests/s.
    span = m["scheduled_time_unix"].max() - m["scheduled_time_unix"].min()
    assert 3 <= len(m) / span <= 12


def test_plain_locust_runs_a_workload(engine_url, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "loadtests" / "shared_prefix.py"),
            "--headless",
            "--host",
            engine_url,
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "10s",
            "--json-file",
            str(tmp_path / "l"),
            "--prefix-tokens",
            "64",
            "--output-tokens",
            "8",
            "--records-out",
            str(tmp_path / "records.jsonl"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    total, failed = locust_requests(tmp_path / "l.json")
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert total > 5 and failed == 0 and len(lines) == total


def test_interrupt_mid_run_writes_a_consistent_bundle(tmp_path):
    out = tmp_path / "b"
    proc = subprocess.Popen(
        kvscope_command(
            "run",
            "--quiet",
            "--workload",
            "chat",
            "--model",
            "tiny-random",
            "--users",
            "4",
            "--duration",
            "120s",
            "--max-prompt-tokens",
            "256",
            "--max-output-tokens",
            "32",
            "--out",
            str(out),
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    records = out / "raw" / "records.jsonl"
    import time

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if records.exists() and len(records.read_text().splitlines()) >= 6:
            break
        time.sleep(0.5)
    assert proc.poll() is None, proc.stdout.read()
    proc.send_signal(2)  # SIGINT, as Ctrl-C
    log, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, log
    r = load(out)
    assert r.run["status"] == "interrupted"
    total, _ = locust_requests(out / "locust" / "stats.json")
    assert total == len(r.requests) and r.requests["request_id"].is_unique
    # The engine was fresh: its finished-request counter, scraped after Locust stopped,
    # counts exactly the recorded requests (in-flight ones were drained, not dropped).
    finished = r.server.loc[r.server["up"], "requests_finished"].dropna()
    assert not finished.empty and finished.max() == len(r.requests)
    assert not math.isnan(r.summary["client"]["req_per_s"])
