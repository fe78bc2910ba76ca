"""Parallel sampling: n completions per prompt, which a paged engine serves from shared
prompt blocks (copy-on-write for the last partial block).

    locust -f loadtests/parallel_sampling.py --host URL --n 8
"""

from __future__ import annotations

from harness.locust_user import register_workload
from harness.workload_common import FixedLengthUser

register_workload("parallel_sampling")


class ParallelSamplingUser(FixedLengthUser):
    workload = "parallel_sampling"
    uses_n = True
