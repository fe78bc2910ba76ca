"""W3C Trace Context for each request: the `traceparent` header whose trace id the server's
OTLP span carries back (`harness.otlp`), the join key between the two. Stdlib only."""

from __future__ import annotations

import os

from harness.workload.record import RequestRecord


def traceparent(rec: RequestRecord) -> str:
    """`00-<trace id>-<parent id>-01` (version 00, sampled: an engine that samples by the
    parent's flag keeps the span) with a fresh random 128-bit trace id, kept in the record."""
    rec.trace_id = os.urandom(16).hex()
    return f"00-{rec.trace_id}-{os.urandom(8).hex()}-01"
