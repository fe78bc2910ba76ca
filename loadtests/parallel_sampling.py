"""Parallel sampling: n completions per prompt, which a paged engine serves from shared
prompt blocks (copy-on-write for the last partial block).

    locust -f loadtests/parallel_sampling.py --host URL --n 8
"""

from __future__ import annotations

from harness.load import FixedLengthUser, register_workload

register_workload("parallel_sampling")


class ParallelSamplingUser(FixedLengthUser):
    workload = "parallel_sampling"
    uses_n = True
