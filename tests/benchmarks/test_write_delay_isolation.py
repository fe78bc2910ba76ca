"""The write-delay benchmark's CPU isolation: the threads it moves off the server's CPU, the
ones it leaves, and that its undo puts them back."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks.sim_write_delay import isolate

CPUS = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(CPUS) < 2, reason="moving a thread off a CPU needs a second one")


@pytest.fixture
def sleepers():
    """Two child processes: one free to run on every CPU this test may use, one bound to the
    first alone (as the server is)."""
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    free, bound = subprocess.Popen(argv), subprocess.Popen(argv)
    os.sched_setaffinity(free.pid, set(CPUS))
    os.sched_setaffinity(bound.pid, {CPUS[0]})
    yield free.pid, bound.pid
    for child in (free, bound):
        child.kill()
        child.wait()


def test_threads_leave_the_cpu_until_undone(sleepers):
    free, bound = sleepers
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # an id whose thread has ended by the time it is moved: skipped, not an error
    undo, done = isolate(CPUS[0], [free, bound, gone.pid])
    assert os.sched_getaffinity(free) == set(CPUS[1:])
    assert os.sched_getaffinity(bound) == {CPUS[0]}
    assert done == f"1 other threads moved off CPU {CPUS[0]} while it ran"
    undo()
    assert os.sched_getaffinity(free) == set(CPUS)
    assert os.sched_getaffinity(bound) == {CPUS[0]}


def test_a_thread_not_on_the_cpu_is_left_alone(sleepers):
    free, _ = sleepers
    os.sched_setaffinity(free, set(CPUS[1:]))
    undo, done = isolate(CPUS[0], [free])
    assert done.startswith("0 other threads")
    undo()
    assert os.sched_getaffinity(free) == set(CPUS[1:])
