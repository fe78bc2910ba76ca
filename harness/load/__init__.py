"""What runs inside a Locust process — the user classes (one request at a time, or a
conversation at a time: `session_user`, and a trace's sessions: `trace_sessions`), their
per-environment state, the record transport to the master, the shapes — with this package's
face the API `loadtests/` imports. Importing it imports Locust, which monkey-patches the
process for gevent, so only Locust processes (the locustfiles, run by `kvscope run` or plain
`locust -f`) import `harness.load`; the Locust-free pieces its users are made of live in
`harness.workload`. May import locust, gevent and `harness.workload`; never torch, pandas or
the engine.
"""

from harness.load.fixed_length import FixedLengthUser
from harness.load.session_user import Opening, SessionUser, WorkloadInputError
from harness.load.shapes import StepAndSpikeShape
from harness.load.trace_sessions import TraceSession, TraceSessions, close_trace_turn, next_messages
from harness.load.user import LLMUser, register_workload
from harness.workload.arrivals import Slot
from harness.workload.conversations import load_conversations
from harness.workload.lengths import MAX_TOTAL, load_sharegpt, pick, sharegpt_like, spread
from harness.workload.prompts import seeded_text, text, words
from harness.workload.record import RequestRecord
from harness.workload.request_spec import RequestSpec
from harness.workload.sessions import Session, Turn
from harness.workload.traces import MOONCAKE_BLOCK_TOKENS, TraceEntry, load_trace, trace_offsets

__all__ = [
    "MAX_TOTAL",
    "MOONCAKE_BLOCK_TOKENS",
    "FixedLengthUser",
    "LLMUser",
    "Opening",
    "RequestRecord",
    "RequestSpec",
    "Session",
    "SessionUser",
    "Slot",
    "StepAndSpikeShape",
    "TraceEntry",
    "TraceSession",
    "TraceSessions",
    "Turn",
    "WorkloadInputError",
    "close_trace_turn",
    "load_conversations",
    "load_sharegpt",
    "load_trace",
    "next_messages",
    "pick",
    "register_workload",
    "seeded_text",
    "sharegpt_like",
    "spread",
    "text",
    "trace_offsets",
    "words",
]
