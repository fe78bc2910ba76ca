"""Open-loop arrivals at a target request rate (--rate, Poisson or --arrival constant).

Arrivals do not wait for answers; users are only in-flight slots. A request that could
not leave on time records its schedule lag, so coordinated omission shows in the data.

    locust -f loadtests/rate.py --host URL -u 64 -r 64 --rate 5 --arrival poisson
"""

from __future__ import annotations

from harness.load import FixedLengthUser, register_workload

register_workload("rate")


class RateUser(FixedLengthUser):
    workload = "rate"
