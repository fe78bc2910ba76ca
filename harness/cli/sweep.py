"""`kvscope sweep`: a load sweep (rates or concurrencies), its table, curve, knee and SLO limit.

Import-light: argparse and the option declarations only; pandas, matplotlib and the runs are
imported by the handler. Workload options and engine flags are `kvscope run`'s (the same
flag groups): workload options go to every point when given, engine flags to the bundled engine.
"""

from __future__ import annotations

import argparse
import sys

from harness.cli.load_flags import add_engine_flags, add_workload_options, comma_list
from harness.run.engine_flags import STARTUP_TIMEOUT_S
from harness.sweep.search import DEFAULT_MAX_POINTS, DEFAULT_REPEATS, DEFAULT_TOLERANCE
from harness.workload.options import WORKLOADS

SWEEP_EPILOG = """\
examples:
  kvscope sweep --concurrency 1,4,16 --duration-per-point 10s --model tiny-random
  kvscope sweep --target http://gpu-box:8000 --rates 1,2,4,8 --slo ttft=1s,tpot=100ms --out runs/sweep1
  kvscope sweep --concurrency 8,32,128 --simulate --sim-model llama-3.1-8b --max-num-seqs 256

knee: points are ordered by load; for each step the elasticity Δln(E2E p99) / Δln(output tok/s)
says how much latency each unit of throughput costs. The knee is the last point before the first
step with elasticity > 1 (more of the added load became waiting than work), or before a step
where throughput stopped growing while latency rose. No such step: no knee in the tested range.

highest load meeting the SLOs: the highest point where at least --attainment (default 90%) of
requests met every SLO (failed requests count as misses).

Without --target the bundled engine starts once and serves every point; the engine flags
below are passed to it, the workload options to every `kvscope run`.

--find-max: instead of running every listed load, search LOW,HIGH (--rates LOW,HIGH open loop,
--concurrency LOW,HIGH closed loop) for the highest load that meets --slo for --attainment of
requests, in as few points as it can: the top first (if it meets the SLOs, the search ends:
search higher); a failing top in open loop gives the server's achieved rate, where the
bracket starts; steps of (1 + --tolerance), squared each time, bracket the limit; bisection
narrows it to within --tolerance (closed loop: adjacent user counts), at most --max-points
points. An open-loop point stops early, and counts as missing, once more requests already
missed a TTFT or E2E SLO (per the server's histogram) than the attainment allows. The two
boundary loads then run --repeats more times each, for the spread of their attainment. When
preemptions start at the boundary, the report says the boundary is KV-bound and links the
failing point's advice. sweep.json's `search` holds the order, the boundary and the spread.
  kvscope sweep --find-max --rates 0.5,16 --slo ttft=2s --simulate --sim-model llama-3.1-70b \\
      --sim-gpu h100-80gb --tensor-parallel-size 4 --duration-per-point 20s
"""


def _loads(text: str) -> list[float]:
    return comma_list(text, float, lambda v: v > 0, "loads must be positive numbers, e.g. 1,2,4,8")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="sweep request rates or concurrencies: table, throughput-latency curve, knee, SLO limit",
        description="Run one short `kvscope run` per load point against one server, then write sweep.json, "
        "sweep.csv, a report with the throughput-vs-latency curve, the knee and the highest load that "
        "meets the SLOs. Each point is a full bundle with its own report.",
        epilog=SWEEP_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument(
        "--target", metavar="URL", help="an OpenAI-compatible server (default: start the bundled engine once)"
    )
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument(
        "--rates", type=_loads, metavar="R1,R2,...", help="open loop: requests per second per point"
    )
    load.add_argument(
        "--concurrency", type=_loads, metavar="C1,C2,...", help="closed loop: concurrent users per point"
    )
    p.add_argument(
        "--workload",
        default="chat",
        choices=sorted(WORKLOADS),
        help="loadtests/NAME.py to run at each point (default: chat)",
    )
    p.add_argument(
        "--duration-per-point", default="20s", metavar="DURATION", help="load time per point (default: 20s)"
    )
    p.add_argument(
        "--slo",
        default="",
        metavar="NAME=DUR,...",
        help="SLOs, e.g. ttft=1s,tpot=100ms (names: ttft, tpot, e2e, itl; with a unit: ms, s, m)",
    )
    p.add_argument(
        "--attainment",
        type=float,
        default=0.9,
        help="share of requests that must meet every SLO for a point to count (default: 0.9)",
    )
    search = p.add_argument_group("search (--find-max)")
    search.add_argument(
        "--find-max",
        action="store_true",
        help="search the range LOW,HIGH of --rates/--concurrency for the highest load meeting --slo",
    )
    search.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help=f"stop when the boundary is bracketed within this share (default: {DEFAULT_TOLERANCE})",
    )
    search.add_argument(
        "--max-points",
        type=int,
        default=DEFAULT_MAX_POINTS,
        help=f"most search points, repeats not counted (default: {DEFAULT_MAX_POINTS})",
    )
    search.add_argument(
        "--repeats",
        type=int,
        default=DEFAULT_REPEATS,
        help=f"extra runs of each boundary load, for the spread (default: {DEFAULT_REPEATS})",
    )
    p.add_argument("--out", metavar="DIR", help="sweep folder (default: runs/<time>-sweep)")
    p.add_argument(
        "--model",
        help="the bundled engine's --model (default tiny-random); with --target, the model to request",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=STARTUP_TIMEOUT_S,
        metavar="S",
        help="seconds to wait for the engine",
    )
    p.add_argument("--workers", type=int, default=1, help="Locust worker processes per point (default 1)")
    p.add_argument(
        "--max-in-flight",
        type=int,
        metavar="N",
        help="with --rates: most requests in flight (kvscope run's --users; default 64)",
    )
    add_workload_options(p, "workload options (as `kvscope run`; forwarded to every point when given)")
    add_engine_flags(p)
    p.set_defaults(func=_sweep)


def _sweep(args: argparse.Namespace) -> int:
    from harness.run.config import ConfigError
    from harness.sweep.config import from_args
    from harness.sweep.execute import execute
    from harness.sweep.find_max import execute_find_max
    from harness.sweep.table import format_table

    try:
        cfg = from_args(args)
    except ConfigError as exc:
        print(f"kvscope sweep: error: {exc}", file=sys.stderr)
        return 2
    result = execute_find_max(cfg) if cfg.find_max else execute(cfg)
    print(format_table(result))
    print(f"sweep: {cfg.out} (report.html, sweep.json)")
    return 0 if result["status"] == "completed" and result["points"] else 1
