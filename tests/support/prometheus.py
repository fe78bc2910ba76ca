"""Start a real Prometheus (Debian package `prometheus`) for tests, and query it; also serve
a small aiohttp app on a free loopback port (`serve_app`) to stand in for a target.

    with start_prometheus(tmp_path, ["127.0.0.1:9400"]) as base:
        result = wait_for_query(base, 'kvscope_target_up{target="a"}', timeout=30)

Each call runs its own server on a free loopback port with a temp config and TSDB under
`tmp_path`; the process is stopped (TERM, then KILL) when the block exits. Scrape jobs use
`honor_labels: true` like dashboards/prometheus/prometheus.yml, so the exporter's own
`instance` label (the engine instance) survives. Targets are `host:port` (path /metrics) or
full http(s) URLs.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import yaml

from tests.support.paths import ROOT
from tests.support.wait import wait_until

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


@contextlib.asynccontextmanager
async def serve_app(app, port: int = 0) -> AsyncIterator[str]:
    """Run an aiohttp `app` on 127.0.0.1 (a free port unless given); yields its base URL."""
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job_groups(targets: Sequence[str]) -> dict[tuple[str, str], list[str]]:
    groups: dict[tuple[str, str], list[str]] = {}
    for t in targets:
        if "://" in t:
            u = urllib.parse.urlsplit(t)
            groups.setdefault((u.scheme, u.path or "/metrics"), []).append(u.netloc)
        else:
            groups.setdefault(("http", "/metrics"), []).append(t)
    return groups


def write_config(
    directory: Path,
    scrape_targets: Sequence[str],
    rule_files: Sequence[str | Path] = (),
    scrape_interval: str = "1s",
) -> Path:
    """prometheus.yml for the targets (JSON is valid YAML, so no YAML library is needed)."""
    jobs = []
    for i, ((scheme, path), hosts) in enumerate(_job_groups(scrape_targets).items()):
        jobs.append(
            {
                "job_name": "kvscope" if i == 0 else f"kvscope-{i}",
                "honor_labels": True,
                "scheme": scheme,
                "metrics_path": path,
                "scrape_interval": scrape_interval,
                "scrape_timeout": scrape_interval,
                "static_configs": [{"targets": list(hosts)}],
            }
        )
    config = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "rule_files": [str(Path(r).resolve()) for r in rule_files],
        "scrape_configs": jobs,
    }
    path = directory / "prometheus.yml"
    path.write_text(json.dumps(config, indent=2))
    return path


def _get_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback test server
        return json.loads(resp.read().decode())


def stop_process(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout_s`."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@contextlib.contextmanager
def running_prometheus(config: Path, work: Path, ready_timeout: float = 30.0) -> Iterator[str]:
    """Run Prometheus on `config` with its TSDB and log under `work`; yields its base URL once ready."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(work / "prometheus.log", "wb")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=work,
    )
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited with {proc.returncode}: "
                    f"{(work / 'prometheus.log').read_text()[-2000:]}"
                )
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as r:  # noqa: S310
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus not ready after {ready_timeout}s")
            time.sleep(0.2)
        yield base
    finally:
        stop_process(proc, 20)
        log.close()


@contextlib.contextmanager
def start_prometheus(
    tmp_path: Path,
    scrape_targets: list[str],
    rule_files: Sequence[str | Path] = (),
    scrape_interval: str = "1s",
    ready_timeout: float = 30.0,
) -> Iterator[str]:
    """Run Prometheus scraping `scrape_targets`; yields its base URL (http://127.0.0.1:PORT)."""
    work = Path(tmp_path) / f"prometheus-{free_port()}"
    work.mkdir(parents=True)
    config = write_config(work, scrape_targets, rule_files, scrape_interval)
    with running_prometheus(config, work, ready_timeout) as base:
        yield base


def query(base: str, promql: str) -> list[dict]:
    """Instant query; returns the `result` list (raises on an API error)."""
    doc = _get_json(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    if doc.get("status") != "success":
        raise RuntimeError(f"query {promql!r} failed: {doc}")
    return doc["data"]["result"]


def wait_for_query(base: str, promql: str, timeout: float = 30.0, predicate=bool) -> list[dict]:
    """Poll `query` until `predicate(result)` holds (see `wait_until`)."""
    return wait_until(lambda: query(base, promql), f"a result of {promql!r}", timeout, 0.5, predicate)


def targets_health(base: str) -> list[dict]:
    """Prometheus's view of its scrape targets (health, lastError)."""
    return _get_json(f"{base}/api/v1/targets")["data"]["activeTargets"]


SHIPPED_PROM_DIR = ROOT / "dashboards" / "prometheus"


@contextlib.contextmanager
def shipped_prometheus(tmp_path: Path, exporter_port: int, engine_port: int, rule_files: Sequence[Path] = ()):
    """The shipped dashboards/prometheus/prometheus.yml with the test's targets, 1 s intervals
    and the shipped alerts.yml (or `rule_files`).

    Not start_prometheus: that writes its own config, and the point here is to run the
    shipped one (honor_labels, the vllm relabel rule, rule_files)."""
    config = yaml.safe_load((SHIPPED_PROM_DIR / "prometheus.yml").read_text())
    config["global"] |= {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(p) for p in rule_files] or [str(SHIPPED_PROM_DIR / "alerts.yml")]
    ports = {"kvscope-exporter": exporter_port, "llm-engine": engine_port}
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [f"127.0.0.1:{ports[job['job_name']]}"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    with running_prometheus(tmp_path / "prometheus.yml", tmp_path) as base:
        yield base
