"""`kvscope worker --master HOST:PORT`: Locust worker process(es) for a run on another machine.

The worker needs kvscope installed (the locustfiles import `harness`), nothing else: with no
--workload it asks the master for the locustfile, custom options come with the master's
spawn message, and records go back over Locust's messaging. Runs in the foreground until
the master quits; Ctrl-C stops the local processes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from harness.run_commands import worker_argv


def run_worker(args: argparse.Namespace) -> int:
    host, sep, port = args.master.rpartition(":")
    if not sep or not port.isdigit():
        print(f"kvscope worker: error: --master wants HOST:PORT, got {args.master!r}", file=sys.stderr)
        return 2
    argv = worker_argv(args.workload, host, int(port))
    children = [subprocess.Popen(argv) for _ in range(max(1, args.processes))]
    try:
        return max(child.wait() for child in children)
    except KeyboardInterrupt:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(10)
        return 130
