"""`kvscope run`'s configuration as one typed record, built and checked before anything starts.

Everything a run does is decided here from the command line, so run.json can store the
whole configuration and a mistake (an unknown workload option, a replay without a trace)
fails in milliseconds rather than after the engine has loaded.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from exporter.cli import duration as parse_duration
from harness.run_cli import ENGINE_FLAGS, HARNESS_OWNED
from harness.workload_options import COMMON, WORKLOADS, options_for, to_argv

CLOSED_LOOP_USERS = 8
OPEN_LOOP_USERS = 64


class ConfigError(ValueError):
    """A run that cannot work as asked; the message says what to change."""


@dataclass(slots=True)
class RunConfig:
    workload: str
    target: str | None
    users: int
    spawn_rate: float
    rate: float
    duration_s: float
    workers: int
    remote_workers: int
    master_host: str
    master_port: int | None  # None: pick a free port
    out: Path
    model: str | None
    workload_argv: list[str] = field(default_factory=list)
    engine_argv: list[str] = field(default_factory=list)
    drain_timeout_s: float = 30.0
    request_timeout_s: float = 300.0
    startup_timeout_s: float = 300.0
    progress: bool = True
    api_key: str = ""

    @property
    def open_loop(self) -> bool:
        return self.rate > 0 or self.workload == "replay"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        if self.api_key:
            d["api_key"] = "<redacted>"
        d["workload_argv"] = _redact(self.workload_argv)
        d["engine_argv"] = _redact(self.engine_argv)
        return d


def _redact(argv: list[str]) -> list[str]:
    return ["<redacted>" if i and argv[i - 1] == "--api-key" else a for i, a in enumerate(argv)]


def _master_bind(text: str | None) -> tuple[str, int | None]:
    if not text:
        return "127.0.0.1", None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"--master-bind wants HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def from_args(args: argparse.Namespace) -> RunConfig:
    workload = args.workload
    own = {o.flag for o in options_for(workload)}
    foreign = [
        o.flag
        for spec in WORKLOADS.values()
        for o in spec.options
        if o.flag not in own and getattr(args, o.dest, None) not in (None, False)
    ]
    if foreign:
        raise ConfigError(f"workload {workload!r} has no option(s) {', '.join(sorted(set(foreign)))}")
    if workload == "replay" and not getattr(args, "trace", None):
        raise ConfigError("the replay workload needs --trace FILE")
    try:
        duration_s = parse_duration(args.duration)
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(str(exc)) from None
    rate = float(args.rate) if args.rate is not None else float(WORKLOADS[workload].defaults.get("rate", 0.0))
    if rate < 0 or not math.isfinite(rate):
        raise ConfigError(f"--rate must be a positive number, got {args.rate}")
    open_loop = rate > 0 or workload == "replay"
    users = args.users if args.users is not None else (OPEN_LOOP_USERS if open_loop else CLOSED_LOOP_USERS)
    if users < 1 or args.workers < 0 or args.remote_workers < 0:
        raise ConfigError("--users must be at least 1, --workers and --remote-workers at least 0")
    if args.workers + args.remote_workers < 1:
        raise ConfigError("need at least one worker (--workers or --remote-workers)")
    engine_argv = to_argv(tuple(o for o in ENGINE_FLAGS if o.dest != "engine_seed"), args) + list(
        args.engine_arg
    )
    if getattr(args, "engine_seed", None) is not None:
        engine_argv += ["--seed", str(args.engine_seed)]
    if args.target and engine_argv:
        raise ConfigError(
            f"engine flags ({' '.join(engine_argv)}) only apply to the bundled engine, not to --target"
        )
    common = tuple(o for o in COMMON if o.dest not in HARNESS_OWNED)
    workload_argv = to_argv(common + WORKLOADS[workload].options, args)
    if args.target:
        if not args.target.startswith(("http://", "https://")):
            raise ConfigError(f"--target must be an http(s) URL, got {args.target!r}")
        if args.model:
            workload_argv += ["--model", args.model]
    workload_argv += ["--rate", str(rate)] if rate > 0 else []
    host, port = _master_bind(args.master_bind)
    out = Path(args.out) if args.out else Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{workload}"
    if (out / "run.json").exists() or (out / "raw").exists():
        raise ConfigError(f"{out} already holds a run; choose another --out (records would mix)")
    return RunConfig(
        workload=workload,
        target=args.target.rstrip("/") if args.target else None,
        users=users,
        spawn_rate=float(args.spawn_rate) if args.spawn_rate else float(users),
        rate=rate,
        duration_s=duration_s,
        workers=args.workers,
        remote_workers=args.remote_workers,
        master_host=host,
        master_port=port,
        out=out,
        model=args.model,
        workload_argv=workload_argv,
        engine_argv=engine_argv,
        drain_timeout_s=float(args.drain_timeout or 30.0),
        request_timeout_s=float(args.request_timeout or 300.0),
        startup_timeout_s=args.startup_timeout,
        progress=not args.quiet,
        api_key=args.api_key or "",
    )
