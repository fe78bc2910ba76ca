"""Step-and-spike load: the calm user count steps up every period, and each period ends in
a spike. The shape drives the user count (Locust ignores -u/-r); -t ends it.

    locust -f loadtests/bursty.py --headless --host URL -t 120s --base-users 4 --spike-users 32
"""

from __future__ import annotations

from harness.load import FixedLengthUser, StepAndSpikeShape, register_workload

register_workload("bursty")


class BurstyUser(FixedLengthUser):
    workload = "bursty"


class BurstyShape(StepAndSpikeShape):
    pass
