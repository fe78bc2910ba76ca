"""`kvscope worker`: add this machine's CPU to a running `kvscope run` (a Locust worker).

Import-light: argparse and the workload names only; the handler starts the workers.
"""

from __future__ import annotations

import argparse

from exporter.units import host_port
from harness.workload.options import WORKLOADS


def register(subparsers: argparse._SubParsersAction) -> None:
    w = subparsers.add_parser(
        "worker",
        help="add this machine's CPU to a running `kvscope run` (a Locust worker)",
        description="Connect a Locust worker to the master of a `kvscope run` started with --master-bind and "
        "--remote-workers. Its records travel to the master with Locust's own messages.",
    )
    w.add_argument(
        "--master", required=True, type=host_port, metavar="HOST:PORT", help="the run's --master-bind address"
    )
    w.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        help="the run's workload (default: fetch the locustfile from the master)",
    )
    w.add_argument(
        "--processes", type=int, default=1, help="worker processes to start on this machine (default 1)"
    )
    w.set_defaults(func=_worker)


def _worker(args: argparse.Namespace) -> int:
    from harness.run.worker import run_worker

    return run_worker(args)
