"""What runs inside a Locust process: the user class, its per-environment state, the record
transport to the master, and the shapes; this package's face is the API `loadtests/` imports.

Importing it imports Locust, which monkey-patches the process for gevent: only Locust
processes (the locustfiles in `loadtests/`, run by `kvscope run` or by plain `locust -f`)
import `harness.load`. The Locust-free pieces those users are made of (request specs,
prompts, lengths, traces, arrivals, calibration, the SSE reader, the request record) live
in `harness.workload`, which the rest of kvscope can import too. May import: locust, gevent,
`harness.workload`; never torch, pandas or the engine.
"""

from harness.load.fixed_length import FixedLengthUser
from harness.load.shapes import StepAndSpikeShape
from harness.load.user import LLMUser, register_workload
from harness.workload.arrivals import Slot
from harness.workload.lengths import MAX_TOTAL, load_sharegpt, pick, sharegpt_like
from harness.workload.prompts import seeded_text, text, words
from harness.workload.request_spec import RequestSpec
from harness.workload.traces import MOONCAKE_BLOCK_TOKENS, TraceEntry, load_trace, trace_offsets

__all__ = [
    "MAX_TOTAL",
    "MOONCAKE_BLOCK_TOKENS",
    "FixedLengthUser",
    "LLMUser",
    "RequestSpec",
    "Slot",
    "StepAndSpikeShape",
    "TraceEntry",
    "load_sharegpt",
    "load_trace",
    "pick",
    "register_workload",
    "seeded_text",
    "sharegpt_like",
    "text",
    "trace_offsets",
    "words",
]
