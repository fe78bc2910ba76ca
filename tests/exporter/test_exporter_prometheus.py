"""A real Prometheus scrapes the real exporter process.

The engine is the DP-2 vLLM V1 fixture served by a stdlib HTTP server; the exporter runs as
a subprocess as a sidecar would start it (`python -m exporter`, the same options as
`kvscope exporter`); Prometheus (Debian package) scrapes the exporter every second and must
answer PromQL on canonical series.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import ROOT
from tests.support.prometheus import free_port, query, start_prometheus, targets_health, wait_for_query
from tests.support.static_metrics import static_server

DATA = Path(__file__).parent / "data" / "metrics"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed"),
]


@contextlib.contextmanager
def exporter_process(*args: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--listen", f"127.0.0.1:{port}", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, proc.stderr.read().decode()
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(base + "/healthz", timeout=1):
                    break
            assert time.monotonic() < deadline, "exporter did not start"
            time.sleep(0.1)
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=10) == 0, proc.stderr.read().decode()
        finally:
            if proc.poll() is None:
                proc.kill()


def test_prometheus_answers_promql_on_canonical_series(tmp_path: Path) -> None:
    fixture = (DATA / "synthetic_vllm_0.11_v1_dp2_cache_config.prom").read_text()
    with (
        static_server(fixture) as engine,
        exporter_process("--target", f"dp2={engine}", "--interval", "1s") as exp,
    ):
        with start_prometheus(tmp_path, [exp.removeprefix("http://")]) as prom:
            usage = wait_for_query(
                prom, 'kvscope_kv_usage_ratio{target="dp2"}', timeout=30, predicate=lambda r: len(r) == 2
            )
            by_instance = {r["metric"]["instance"]: float(r["value"][1]) for r in usage}
            assert by_instance == {"0": 0.75, "1": 0.25}  # honor_labels kept the engine instance
            assert {r["metric"]["model"] for r in usage} == {"Qwen/Qwen2.5-7B-Instruct"}
            total = query(prom, 'sum by (target) (kvscope_kv_capacity_tokens{target="dp2"})')
            assert float(total[0]["value"][1]) == 480000
            p50 = wait_for_query(
                prom,
                "histogram_quantile(0.5, kvscope_time_to_first_token_seconds_bucket"
                '{target="dp2",instance="0"})',
                timeout=10,
            )
            assert 0.1 < float(p50[0]["value"][1]) <= 0.5  # 25th of 50 lies in the (0.1, 0.5] bucket
            up = query(prom, 'kvscope_target_up{target="dp2"}')
            assert float(up[0]["value"][1]) == 1
            health = targets_health(prom)
            assert [t["health"] for t in health] == ["up"], health
