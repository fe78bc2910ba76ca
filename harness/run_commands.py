"""The command lines `kvscope run` starts: engine, exporter, Locust master and workers.

Pure functions of the configuration (and the ports and paths chosen), so run.json can
store exactly what ran and tests can check the wiring without starting anything. Children
run with this interpreter (`sys.executable -m ...`), so the run works from a virtualenv
that is not on PATH.
"""

from __future__ import annotations

import sys
from pathlib import Path

import loadtests
from harness.run_config import RunConfig

ENGINE_TARGET_NAME = "engine"


def locustfile(workload: str) -> Path:
    return Path(loadtests.__file__).resolve().parent / f"{workload}.py"


def engine_argv(cfg: RunConfig, port: int) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "harness.cli",
        "engine",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *(["--model", cfg.model] if cfg.model else []),
        *cfg.engine_argv,
    ]
    if cfg.api_key:
        argv += ["--api-key", cfg.api_key]
    return argv


def target_name(cfg: RunConfig) -> str:
    if cfg.target is None:
        return ENGINE_TARGET_NAME
    return cfg.target.split("://", 1)[-1].split("/", 1)[0]


def exporter_argv(cfg: RunConfig, target_url: str, port: int, record_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness.cli",
        "exporter",
        "--target",
        f"{target_name(cfg)}={target_url}/metrics",
        "--listen",
        f"127.0.0.1:{port}",
        "--interval",
        "1s",
        "--record",
        str(record_dir),
    ]


def master_argv(
    cfg: RunConfig, target_url: str, master_port: int, records: Path, status: Path, csv_prefix: Path
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(locustfile(cfg.workload)),
        "--headless",
        "--master",
        "--master-bind-host",
        cfg.master_host,
        "--master-bind-port",
        str(master_port),
        "--expect-workers",
        str(cfg.workers + cfg.remote_workers),
        "--expect-workers-max-wait",
        "120",
        "--host",
        target_url,
        "-u",
        str(cfg.users),
        "-r",
        str(cfg.spawn_rate),
        "-t",
        f"{max(1, round(cfg.duration_s))}s",
        "--csv",
        str(csv_prefix),
        "--only-summary",
        # Final stats: Locust writes --json-file after the last worker report (the CSVs
        # are rewritten once a second and can miss the last one).
        "--json-file",
        str(csv_prefix.parent / "stats"),  # Locust adds .json
        "--records-out",
        str(records),
        "--status-out",
        str(status),
        *cfg.workload_argv,
    ]
    if cfg.api_key and "--api-key" not in cfg.workload_argv:
        argv += ["--api-key", cfg.api_key]
    return argv


def worker_argv(workload: str | None, master_host: str, master_port: int) -> list[str]:
    """A worker on this machine; with no workload it fetches the locustfile from the master."""
    f = str(locustfile(workload)) if workload else "-"
    host = "127.0.0.1" if master_host in ("0.0.0.0", "") else master_host
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        f,
        "--worker",
        "--master-host",
        host,
        "--master-port",
        str(master_port),
    ]
