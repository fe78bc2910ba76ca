"""`kvscope report DIR`: the Markdown and self-contained HTML report of a run or a sweep.

Import-light: argparse only; pandas and matplotlib load in the handler.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPORT_EPILOG = """\
writes into DIR: report.md, report.html (one file: plots embedded, no scripts, no network),
plots/*.png (latency CDFs; KV usage, queue and preemptions over time with TTFT; throughput;
the sweep curve when DIR is a sweep). The Advice section comes first; it shows advice.json
when DIR has one (written by `kvscope advise`).

The measurement self-check marks a run UNRELIABLE (with the reason) when the client lagged
(its delay above the network floor had p50 > 50 ms, or moved TTFT/E2E p99 by > max(50 ms,
10%)), open-loop requests left > 50 ms late at p99, Locust warned about its CPU, or a
request failed inside the client.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="write report.md and a self-contained report.html for a results bundle or sweep",
        description="Analyse a results bundle (from `kvscope run`) or a sweep folder "
        "(from `kvscope sweep`) and "
        "write the report: advice first, the measurement self-check, latency percentiles and CDFs, "
        "throughput and goodput, KV usage over time, latency by KV-usage band, before/after "
        "preemptions, client vs server timing, errors and request lengths.",
        epilog=REPORT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dir", metavar="DIR", help="results bundle or sweep folder")
    p.add_argument(
        "--slo",
        default=None,
        metavar="NAME=DUR,...",
        help="SLOs for goodput, e.g. ttft=1s,tpot=100ms (names ttft, tpot, e2e, itl; with a unit: ms, s, m); "
        "default: the run's own --slo if it recorded one",
    )
    p.add_argument(
        "--summary", action="store_true", help="also (re)write DIR/summary.json from the same analysis"
    )
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace) -> int:
    from harness.analysis.slo import parse_slos
    from harness.analysis.summary import write_summary
    from harness.bundle.errors import BundleError
    from harness.bundle.schema import SWEEP_JSON
    from harness.report.write import write_report

    d = Path(args.dir)
    try:
        slos = parse_slos(args.slo) if args.slo else None
        if args.summary and not (d / SWEEP_JSON).exists():
            write_summary(d, slos)
        path = write_report(d, slos=slos)
    except (BundleError, ValueError) as exc:  # not a bundle or sweep, or a bad --slo
        print(f"kvscope report: error: {exc}", file=sys.stderr)
        return 2
    print(f"report: {path} and {path.with_suffix('.md')}")
    return 0
