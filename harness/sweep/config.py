"""`kvscope sweep`'s configuration, built from the command line with the checks `kvscope run`
uses (workload options, engine flags, --target, the default output folder), so a sweep
fails on a bad flag before its first point, with the message a run would give."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.analysis.knee import DEFAULT_ATTAINMENT
from harness.analysis.slo import parse_slos
from harness.run.config import (
    ConfigError,
    api_key,
    bundled_engine_argv,
    default_out,
    duration,
    target_url,
    workload_argv,
)
from harness.run.engine_flags import STARTUP_TIMEOUT_S
from harness.sweep.search import DEFAULT_MAX_POINTS, DEFAULT_REPEATS, DEFAULT_TOLERANCE

SweepMode = Literal["rate", "concurrency"]


@dataclass(slots=True)
class SweepConfig:
    mode: SweepMode
    loads: list[float]
    out: Path
    target: str | None = None
    workload: str = "chat"
    duration_per_point: str = "20s"
    slo: str = ""
    attainment: float = DEFAULT_ATTAINMENT
    model: str | None = None
    run_args: list[str] = field(default_factory=list)  # passed to every `kvscope run` verbatim
    engine_args: list[str] = field(default_factory=list)  # passed to `kvscope engine serve`
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    api_key: str = field(default="", repr=False)  # reaches the points through their environment
    find_max: bool = False  # search `loads` = [low, high] for the highest load meeting the SLOs
    tolerance: float = DEFAULT_TOLERANCE
    max_points: int = DEFAULT_MAX_POINTS
    repeats: int = DEFAULT_REPEATS  # extra runs of each boundary point, for the spread

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        d["api_key"] = "<redacted>" if self.api_key else ""
        return d


def run_args(args: argparse.Namespace) -> list[str]:
    """What every point's `kvscope run` gets besides its load: the workload options given,
    the workers, and with --rates the most requests in flight."""
    out = workload_argv(args, args.workload) + ["--workers", str(args.workers)]
    if args.max_in_flight and args.rates:
        out += ["--users", str(args.max_in_flight)]
    return out


def from_args(args: argparse.Namespace) -> SweepConfig:
    engine = bundled_engine_argv(args)
    duration(args.duration_per_point, "--duration-per-point")
    try:
        parse_slos(args.slo)
    except ValueError as exc:
        raise ConfigError(f"--slo: {exc}") from None
    if not 0 < args.attainment <= 1:
        raise ConfigError("--attainment must be in (0, 1]")
    mode, loads = ("rate", args.rates) if args.rates else ("concurrency", args.concurrency)
    if args.find_max:
        check_search(args, loads)
    return SweepConfig(
        mode,
        loads,
        Path(args.out) if args.out else default_out("sweep"),
        target_url(args.target),
        args.workload,
        args.duration_per_point,
        args.slo,
        args.attainment,
        args.model,
        run_args(args),
        engine,
        args.startup_timeout,
        api_key(args),
        args.find_max,
        args.tolerance,
        args.max_points,
        args.repeats,
    )


def check_search(args: argparse.Namespace, loads: list[float]) -> None:
    """--find-max's own checks: a range LOW,HIGH, SLOs to meet, a sane budget."""
    if len(loads) != 2 or not loads[0] < loads[1]:
        raise ConfigError("--find-max searches a range: give --rates LOW,HIGH or --concurrency LOW,HIGH")
    if not args.slo:
        raise ConfigError("--find-max needs --slo: the highest load meeting which SLOs?")
    if not 0 < args.tolerance < 1:
        raise ConfigError("--tolerance must be in (0, 1), e.g. 0.1 for 10%")
    if args.max_points < 2 or args.repeats < 0:
        raise ConfigError("--max-points must be at least 2 and --repeats at least 0")
