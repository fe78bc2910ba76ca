"""`kvscope worker --master HOST:PORT`: Locust worker process(es) for a run on another machine.

The worker needs kvscope installed (the locustfiles import `harness`), nothing else: with no
--workload it asks the master for the locustfile, custom options come with the master's
spawn message, and records go back over Locust's messaging. Runs in the foreground until
the master quits; Ctrl-C stops the local processes.
"""

from __future__ import annotations

import argparse
import subprocess

from harness.run.commands import worker_command


def run_worker(args: argparse.Namespace) -> int:
    """`args.master` is (host, port), parsed by the command line."""
    argv = worker_command(args.workload, *args.master)
    children = [subprocess.Popen(argv) for _ in range(max(1, args.processes))]
    try:
        return max(child.wait() for child in children)
    except KeyboardInterrupt:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(10)
        return 130
