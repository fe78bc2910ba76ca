"""The same load test again, on a server restarted with a change: `kvscope run` with the
recorded configuration (workload, users, duration, spawn rate, seed, every workload option),
against the same command with the change's flags set (`changes.with_flags`).

The rerun is a subprocess in a session of its own, like a sweep's points: it starts and stops
its server itself, and a SIGINT or SIGTERM to this process is passed on to it, so its orderly
stop (Locust drained, the server stopped by its process group) runs before this process goes.
Environment variables of the recorded --serve command whose values were redacted in run.json
are inherited from this process's environment instead.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.run.commands import kvscope_command
from harness.run.serve import REDACTED
from harness.verify.changes import FlagChange, with_flags


class NotRerunnable(ValueError):
    """The bundle's server was not started by kvscope, or its configuration is not recorded."""


@dataclass(frozen=True, slots=True)
class Rerun:
    out: Path
    exit_code: int
    log: Path


def _served(run: dict[str, Any]) -> dict[str, Any] | None:
    """The --serve command's record, None for the bundled engine; NotRerunnable otherwise."""
    cfg = run.get("config") or {}
    serve = cfg.get("serve")
    if serve:
        return serve
    if cfg.get("target") is None and run.get("bundled_engine", True):
        return None
    raise NotRerunnable(
        'the run was against a --target kvscope did not start; rerun it with --serve "CMD" so kvscope '
        "can restart the server with each change"
    )


def rerun_argv(run: dict[str, Any], out: Path, change: FlagChange | None) -> list[str]:
    """`kvscope run ...` repeating the recorded run, with `change` applied to its server."""
    cfg = run.get("config")
    if not isinstance(cfg, dict) or "workload" not in cfg:
        raise NotRerunnable("run.json records no configuration to repeat")
    serve = _served(run)
    argv = [
        "run", "--quiet", "--no-advise", "--out", str(out),
        "--workload", cfg["workload"], "--users", str(cfg["users"]),
        "--duration", f"{cfg['duration_s']!r}s", "--spawn-rate", repr(cfg["spawn_rate"]),
        "--workers", str(cfg.get("workers", 1)),
        "--startup-timeout", f"{cfg.get('startup_timeout_s', 300):g}",
        "--max-error-rate", f"{cfg.get('max_error_rate', 0.01):g}",
    ]  # fmt: skip
    if cfg.get("warmup_s"):
        argv += ["--warmup", f"{cfg['warmup_s']:g}s"]
    argv += list(cfg.get("workload_argv") or [])  # the seed, rate, model and every workload option
    if serve is None:
        engine = list(cfg.get("engine_argv") or [])
        engine = with_flags(engine, change) if change else engine
        argv += (["--model", cfg["model"]] if cfg.get("model") else []) + [
            f"--engine-arg={w}" for w in engine
        ]
    else:
        command = with_flags(serve["argv"], change) if change else list(serve["argv"])
        env = [f"{k}={v}" for k, v in (serve.get("env") or {}).items() if v != REDACTED]
        argv += ["--serve", shlex.join(env + command)]
        if serve.get("port_source") == "--target":
            argv += ["--target", run.get("target") or ""]
    for spec in cfg.get("kv_events") or []:
        argv += ["--kv-events"] if spec == "auto" else [f"--kv-events={spec}"]
    if otlp := cfg.get("otlp"):
        host, port = otlp["listen"]
        argv += ["--otlp-listen", f"{host}:{port}", "--otlp-grace", f"{otlp['grace_s']:g}s"]
    if cfg.get("deployment_text"):
        argv += ["--deployment", cfg["deployment_text"]]
    if cfg.get("llamacpp_kv_layout") not in (None, "auto"):
        argv += ["--llamacpp-kv-layout", cfg["llamacpp_kv_layout"]]
    return kvscope_command(*argv)


def rerun(run: dict[str, Any], out: Path, change: FlagChange | None, log: Path) -> Rerun:
    """Run it to the end (see the module doc for signals)."""
    argv = rerun_argv(run, out, change)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as sink:
        sink.write(f"$ {shlex.join(argv)}\n".encode())
        sink.flush()
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        forward = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def pass_on(signum: int, frame: Any) -> None:
            proc.send_signal(signum)

        for sig in forward:
            signal.signal(sig, pass_on)
        try:
            code = proc.wait()
        finally:
            for sig, handler in forward.items():
                signal.signal(sig, handler)
    return Rerun(out, code, log)
