"""The exporter image's requirement set, proven without a container engine.

No image can be built here (see deploy/README.md: no registry to pull python:3.11-slim from,
and the OCI runtime cannot start containers on this host). So this test does what the image
build does, in a fresh venv: the same build context (the repository filtered by .dockerignore),
the same `pip install` line as exporter.Dockerfile, then the image's ENTRYPOINT, against a live
target on loopback. It fails if the exporter's dependencies pull in torch, pandas, locust or
numpy, or if the entrypoint cannot start and scrape without them.
"""

from __future__ import annotations

import fnmatch
import http.server
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.paths import ROOT

DOCKERFILE = ROOT / "deploy" / "images" / "exporter.Dockerfile"
HEAVY = {"torch", "pandas", "locust", "numpy"}
# vLLM V1 names, as a vLLM server exposes them.
VLLM_EXPOSITION = b"""\
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


def dockerfile_install_spec() -> str:
    """The requirement that the build stage installs, e.g. "/src" (no extras)."""
    (spec,) = re.findall(r"^RUN /opt/kvscope/bin/pip install (\S+)\s*$", DOCKERFILE.read_text(), re.MULTILINE)
    return spec.strip('"')


def dockerfile_entrypoint() -> list[str]:
    (line,) = re.findall(r"^ENTRYPOINT (\[.*\])\s*$", DOCKERFILE.read_text(), re.MULTILINE)
    return json.loads(line)


def build_context(dest: Path) -> Path:
    """The repository as `docker build .` sends it: what .dockerignore leaves."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    nested = [p.removeprefix("**/") for p in patterns if p.startswith("**/")]
    top = [p for p in patterns if not p.startswith("**/")]
    assert all("/" not in p and not p.startswith("!") for p in top + nested), "only simple patterns here"

    def ignore(folder: str, names: list[str]) -> set[str]:
        at_top = Path(folder) == ROOT
        return {n for n in names if any(fnmatch.fnmatch(n, p) for p in nested + (top if at_top else []))}

    shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VllmMetrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(VLLM_EXPOSITION)))
        self.end_headers()
        self.wfile.write(VLLM_EXPOSITION)

    def log_message(self, *args):
        pass


@pytest.fixture
def vllm_target():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), VllmMetrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as response:
        return response.read().decode()


@pytest.mark.slow
def test_exporter_image_requirements_are_light_and_its_entrypoint_scrapes(tmp_path, vllm_target):
    assert dockerfile_install_spec() == "/src", "the exporter image must install base dependencies only"
    src = build_context(tmp_path / "src")
    assert not (src / "tests").exists() and not (src / ".git").exists()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    listed = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format=json"], capture_output=True, text=True, check=True
    )
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert {"kvscope", "aiohttp", "prometheus-client"} <= installed
    assert installed.isdisjoint(HEAVY), sorted(installed & HEAVY)

    entrypoint = [str(venv / "bin" / dockerfile_entrypoint()[0]), *dockerfile_entrypoint()[1:]]
    helped = subprocess.run([*entrypoint, "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0, helped.stderr
    assert "--target" in helped.stdout and "/healthz" in helped.stdout

    port = free_port()
    exporter = subprocess.Popen(
        [*entrypoint, f"--listen=127.0.0.1:{port}", f"--target=vllm={vllm_target}", "--interval=200ms"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        metrics, deadline = "", time.monotonic() + 30
        while time.monotonic() < deadline and exporter.poll() is None:
            try:
                metrics = get(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                metrics = ""
            if re.search(r'^kvscope_target_up\{[^}]*target="vllm"[^}]*\} 1\.0$', metrics, re.MULTILINE):
                break
            time.sleep(0.2)
        assert exporter.poll() is None, exporter.communicate()[0]
        assert re.search(r'^kvscope_target_up\{[^}]*target="vllm"[^}]*\} 1\.0$', metrics, re.MULTILINE), (
            metrics
        )
        usage = re.search(r"^kvscope_kv_usage_ratio\{([^}]*)\} (\S+)$", metrics, re.MULTILINE)
        assert usage and float(usage.group(2)) == pytest.approx(0.42), metrics
        assert 'model="smol"' in usage.group(1) and 'target="vllm"' in usage.group(1)
        assert json.loads(get(f"http://127.0.0.1:{port}/healthz")) == {"status": "ok", "targets": 1, "up": 1}
    finally:
        exporter.terminate()
        exporter.wait(10)
