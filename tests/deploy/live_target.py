"""What both exporter-image tests share: the packages the image must not contain, a vLLM
exposition for a live target on loopback, and the check that the exporter scraped it."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request

HEAVY = {"torch", "pandas", "locust", "numpy"}
# vLLM V1 names, as a vLLM server exposes them.
VLLM_EXPOSITION = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smol"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="smol"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="smol"} 0.42
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="smol"} 7.0
"""


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.read().decode()


TARGET_UP = re.compile(r'^kvscope_target_up\{[^}]*target="vllm"[^}]*\} 1\.0$', re.MULTILINE)
KV_USAGE = re.compile(r'^kvscope_kv_usage_ratio\{([^}]*target="vllm"[^}]*)\} (\S+)$', re.MULTILINE)


def check_exporter_scrapes(exporter: subprocess.Popen, port: int, timeout_s: float) -> None:
    """Assert that the exporter on 127.0.0.1:`port`, started with `--target=vllm=<a
    vllm_metrics_server URL>`, reports the target up with the served KV usage (0.42), under
    the served model's name, and that /healthz counts it up."""
    metrics, deadline = "", time.monotonic() + timeout_s
    while time.monotonic() < deadline and exporter.poll() is None and not TARGET_UP.search(metrics):
        try:
            metrics = get(f"http://127.0.0.1:{port}/metrics")
        except OSError:
            time.sleep(0.2)
    assert exporter.poll() is None, exporter.communicate()[0]
    assert TARGET_UP.search(metrics), metrics
    usage = KV_USAGE.search(metrics)
    assert usage and float(usage.group(2)) == 0.42 and 'model="smol"' in usage.group(1), metrics
    assert json.loads(get(f"http://127.0.0.1:{port}/healthz")) == {"status": "ok", "targets": 1, "up": 1}
