"""Long prompts, short answers: prefill-heavy and KV-capacity-bound.

locust -f loadtests/long_context.py --host URL --prompt-tokens 8000 --output-tokens 64
"""

from __future__ import annotations

from harness.load import FixedLengthUser, register_workload

register_workload("long_context")


class LongContextUser(FixedLengthUser):
    workload = "long_context"
