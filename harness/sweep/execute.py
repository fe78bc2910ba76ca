"""`kvscope sweep`: one short `kvscope run` per load point, then a table, a curve and a knee.

Each point is a full `kvscope run` in a subprocess (`--target` the same server every time),
so a point is exactly what a user would get by hand, its bundle is complete and reportable on
its own, and Locust's gevent monkey-patching never touches this process. Without --target
the bundled engine starts once, before the first point, and serves every point: restarting
it would add minutes of model load per point and throw away nothing worth throwing away
(the prefix cache is part of the steady state a sweep measures). The analysis copes with an
engine reused across points: counters are read as increases, never as absolute values.

Outputs in --out: point-NN/ (a bundle with its own report), sweep.json, sweep.csv, and the
sweep report (report.md, report.html, plots/sweep.png). Invariant: sweep.json and the table
printed at the end come from the same rows, built by `point_row` from each point's summary.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.analysis.summary import write_summary
from harness.bundle.schema import REQUESTS
from harness.run import procs
from harness.run.bundled_engine import start_bundled_engine
from harness.run.commands import child_env, kvscope_command
from harness.run.outcome import MEASURED, Exit
from harness.sweep.config import SweepConfig
from harness.sweep.doom import DoomWatch
from harness.sweep.table import load_label, point_row, write_results

WATCH_INTERVAL_S = 1.0
DEFAULT_MODEL = "tiny-random"  # a sweep restarts nothing between points, but starts in seconds


def start_engine(cfg: SweepConfig) -> tuple[procs.Child, str]:
    """The bundled engine on a free port; returns (child, base URL) once /health answers."""
    return start_bundled_engine(
        cfg.model or DEFAULT_MODEL, cfg.engine_args, cfg.out / "logs", cfg.api_key, cfg.startup_timeout_s
    )


def _wait(proc: subprocess.Popen, watch: DoomWatch | None) -> int:
    """The point's exit status; with a watch, checked once a second and stopped (SIGINT: the
    run then writes its bundle) once the point can no longer meet its SLOs."""
    while True:
        try:
            return proc.wait(timeout=None if watch is None else WATCH_INTERVAL_S)
        except subprocess.TimeoutExpired:
            if watch is not None and watch.doomed():
                proc.send_signal(signal.SIGINT)
                return proc.wait()


def run_point(cfg: SweepConfig, index: int, load: float, target: str, watch: DoomWatch | None = None) -> Path:
    """One point's bundle; `watch` may stop it early (its `reason` then says why)."""
    out = cfg.out / f"point-{index:02d}"
    argv = kvscope_command(
        "run",
        "--target",
        target,
        "--workload",
        cfg.workload,
        "--duration",
        cfg.duration_per_point,
        "--out",
        str(out),
        "--quiet",
        *cfg.run_args,
    )
    argv += (
        ["--rate", f"{load:g}"]
        if cfg.mode == "rate"
        else ["--users", str(int(load)), "--spawn-rate", str(int(load))]
    )
    if cfg.target and cfg.model:
        argv += ["--model", cfg.model]
    with open(cfg.out / "logs" / f"point-{index:02d}.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=child_env(cfg.api_key))
        try:
            rc = _wait(proc, watch)
        except KeyboardInterrupt:
            # The run got the same Ctrl-C and is stopping Locust and writing its bundle; killing
            # it now (as subprocess.call would) would orphan its engine and Locust processes.
            proc.wait()
            raise
    # A point that measured (errors and an unreliable client included: those are results)
    # counts; one whose target was lost, that failed or was interrupted stops the sweep.
    stopped = watch is not None and watch.reason is not None and rc == Exit.INTERRUPTED
    if (rc not in MEASURED and not stopped) or not (out / REQUESTS).exists():
        raise RuntimeError(
            f"`kvscope run` for point {index} ({load_label(cfg.mode, load)}) exited {rc}; "
            f"see {cfg.out / 'logs' / f'point-{index:02d}.log'}"
        )
    return out


def serve_points(
    cfg: SweepConfig, say: Callable[[str], None], points: Callable[[str], None]
) -> tuple[str, str]:
    """Start the bundled engine unless there is a --target, run `points(target URL)`, stop the
    engine: (status, target). A Ctrl-C or a point that failed ends the points, not the sweep:
    what was measured is still written."""
    (cfg.out / "logs").mkdir(parents=True, exist_ok=True)
    engine, status, target = None, "completed", cfg.target or ""
    try:
        if cfg.target is None:
            say(f"starting the bundled engine ({cfg.model or DEFAULT_MODEL}) once for all points")
            engine, target = start_engine(cfg)
        points(target)
    except KeyboardInterrupt:
        status = "interrupted"
    except RuntimeError as exc:
        status = f"failed: {exc}"
        say(f"error: {exc}")
    finally:
        if engine is not None:
            engine.stop()
    return status, target


def say_sweep(message: str) -> None:
    print(f"kvscope sweep: {message}", file=sys.stderr, flush=True)


def execute(cfg: SweepConfig, say: Callable[[str], None] = say_sweep) -> dict[str, Any]:
    """Run every point, write sweep.json/csv and the reports; returns sweep.json's content."""
    from harness.report.write import write_report

    rows: list[dict[str, Any]] = []

    def points(target: str) -> None:
        for i, load in enumerate(cfg.loads):
            t = time.monotonic()
            say(f"point {i + 1}/{len(cfg.loads)}: {load_label(cfg.mode, load)} for {cfg.duration_per_point}")
            bundle = run_point(cfg, i, load, target)
            summary = write_summary(bundle, cfg.slo or None)
            write_report(bundle, slos=cfg.slo or None)
            rows.append(point_row(i, cfg.mode, load, summary, bundle.name))
            say(
                f"  {summary['throughput']['output_tokens_per_s']:.1f} output tok/s, E2E p99 "
                f"{(summary['latency']['e2e']['p99'] or 0) * 1000:.0f} ms ({time.monotonic() - t:.0f} s)"
            )

    status, target = serve_points(cfg, say, points)
    result = write_results(cfg, rows, status, target)
    write_report(cfg.out)
    return result
