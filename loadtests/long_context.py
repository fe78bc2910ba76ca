"""Long prompts, short answers: prefill-heavy and KV-capacity-bound.

locust -f loadtests/long_context.py --host URL --prompt-tokens 8000 --output-tokens 64
"""

from __future__ import annotations

from harness.locust_user import register_workload
from harness.workload_common import FixedLengthUser

register_workload("long_context")


class LongContextUser(FixedLengthUser):
    workload = "long_context"
