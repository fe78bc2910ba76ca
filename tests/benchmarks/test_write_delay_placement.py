"""The write-delay benchmark places only the processes it starts. A program it did not start
keeps its CPU affinity and its priority through a whole `python -m benchmarks.run_all --only
sim_write_delay`, watched from inside that program the whole time, so a change undone before
the benchmark ends is seen too."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

pytestmark = pytest.mark.slow

# "The other program": reports its affinity and niceness, then every change to either, until
# its stdin closes. select() on stdin is both the poll interval and the way to stop it.
WATCHER = """
import os, select, sys
def state():
    return sorted(os.sched_getaffinity(0)), os.getpriority(os.PRIO_PROCESS, 0)
last = state()
print("start", last, flush=True)
while not select.select([sys.stdin], [], [], 0.01)[0]:
    if state() != last:
        last = state()
        print("changed", last, flush=True)
print("end", state(), flush=True)
"""


def test_a_process_the_benchmark_did_not_start_keeps_its_affinity_and_priority(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    other = subprocess.Popen(
        [sys.executable, "-c", WATCHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        os.sched_setaffinity(other.pid, cpus)  # free to run on the CPU the server will be given
        started = other.stdout.readline()
        out = tmp_path / "RESULTS.md"
        bench = subprocess.run(
            [sys.executable, "-m", "benchmarks.run_all", "--only", "sim_write_delay", "--out", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        other.stdin.close()
        report = other.stdout.read()
    finally:
        other.kill()
        other.wait()
    assert bench.returncode == 0, bench.stderr[-2000:]
    assert started == f"start ({cpus}, 0)\n"
    assert report == f"end ({cpus}, 0)\n"  # no "changed" line at any point of the run
    results = out.read_text()
    assert "| sim_write_delay | ok |" in results, results[:2000]
    assert "no other process on the machine was moved or reniced" in results
    if len(cpus) > 1:  # the benchmark did place its own processes, on the CPU the watcher may use
        assert f"API server on CPU {cpus[0]}" in results
