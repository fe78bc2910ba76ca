"""The command lines `kvscope run` and `kvscope sweep` start: engine, exporter, Locust master
and workers, and (for a sweep's points) `kvscope run` itself.

Pure functions of the configuration (and the ports and paths chosen), so run.json can
store exactly what ran and tests can check the wiring without starting anything. Children
run with this interpreter (`sys.executable -m ...`), so the run works from a virtualenv
that is not on PATH. No secret is ever on a command line (`ps` shows command lines to every
user of the machine): the API key reaches the engine and Locust through the environment
(`child_env`), which the engine and the Locust user both read.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from harness.run.config import RunConfig
from harness.workload.options import API_KEY_ENV, WORKLOADS

ENGINE_TARGET_NAME = "engine"
LOOPBACK = "127.0.0.1"


def kvscope_command(*args: str) -> list[str]:
    """`kvscope ARGS...` with this interpreter."""
    return [sys.executable, "-m", "harness.cli", *args]


def connect_host(bind_host: str) -> str:
    """Where a process on this machine reaches a listener bound to `bind_host`."""
    return LOOPBACK if bind_host in ("0.0.0.0", "") else bind_host


def child_env(api_key: str) -> dict[str, str] | None:
    """The environment of a child that needs the API key (None: inherit this one unchanged)."""
    return {**os.environ, API_KEY_ENV: api_key} if api_key else None


def engine_command(model: str | None, engine_flags: list[str], port: int) -> list[str]:
    """The bundled engine on 127.0.0.1:`port` (`--model` only when given: the engine's default)."""
    return kvscope_command(
        "engine",
        "serve",
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        *(["--model", model] if model else []),
        *engine_flags,
    )


def target_name(cfg: RunConfig) -> str:
    if cfg.target is None:
        return ENGINE_TARGET_NAME
    return cfg.target.split("://", 1)[-1].split("/", 1)[0]


def exporter_command(
    cfg: RunConfig, target_url: str, port: int, record_dir: Path, kv_events: list[str] = ()
) -> list[str]:
    """`kv_events`: the exporter's --kv-events values (harness.run.kv_events)."""
    return kvscope_command(
        "exporter",
        "--target",
        f"{target_name(cfg)}={target_url}/metrics",
        "--listen",
        f"{LOOPBACK}:{port}",
        "--interval",
        "1s",
        "--record",
        str(record_dir),
        *(arg for spec in kv_events for arg in ("--kv-events", spec)),
        *(["--llamacpp-kv-layout", cfg.llamacpp_kv_layout] if cfg.llamacpp_kv_layout != "auto" else []),
    )


def master_command(
    cfg: RunConfig, target_url: str, master_port: int, records: Path, status: Path, csv_prefix: Path
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(WORKLOADS[cfg.workload].locustfile),
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
        f"{max(1, round(cfg.warmup_s + cfg.duration_s))}s",
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
        *(["--warmup-s", f"{cfg.warmup_s:g}"] if cfg.warmup_s else []),
        *cfg.workload_argv,
    ]
    return argv


def worker_command(workload: str | None, master_host: str, master_port: int) -> list[str]:
    """A worker on this machine; with no workload it fetches the locustfile from the master."""
    f = str(WORKLOADS[workload].locustfile) if workload else "-"
    host = connect_host(master_host)
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
