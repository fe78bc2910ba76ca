"""The trace-id join of spans.parquet to requests.parquet: what is matched, and what is
counted instead of guessed."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from harness.bundle.read import normalise_requests
from harness.bundle.spans import fill_from_spans, join_stats, spans_table
from harness.otlp.span import ServerSpan
from harness.workload.record import RequestRecord


def record(i: int, trace: str | None, ok: bool = True, sse: bool = False) -> dict:
    rec = RequestRecord(f"r{i}", "w", "chat", "chat", send_time_unix=100.0 + i, ttft_s=0.2, e2e_s=1.0)
    rec.ok, rec.trace_id = ok, trace
    if not ok:
        rec.set_error("http_5xx")
    if sse:
        rec.apply_server_timing({"queue_time_s": 0.01, "ttft_s": 0.1, "e2e_s": 0.9})
    return rec.to_dict()


def span(trace: str, sid: str, end: float, fmt: str = "vllm", role: str = "request", **values) -> dict:
    s = ServerSpan(trace, sid, "", "llm_request", fmt, role, "svc", "scope", 1.0, end)
    for k, v in values.items():
        setattr(s, k, v)
    return s.to_dict()


def test_join_fills_only_requests_without_sse_timing_and_counts_the_rest():
    requests = normalise_requests(
        pd.DataFrame(
            [
                record(0, "a" * 32),
                record(1, "b" * 32, sse=True),
                record(2, "c" * 32),  # no span came back: missing
                record(3, "d" * 32, ok=False),  # failed: expected to have no span
                record(4, None),  # sent with --no-traceparent
            ]
        )
    )
    spans = spans_table(
        [
            span("a" * 32, "1", 5.0, queue_time_s=0.02, ttft_s=0.15, e2e_s=0.95, num_preemptions=None),
            span("a" * 32, "2", 6.0, queue_time_s=9.0),  # a second span of the same trace: extra
            span("b" * 32, "3", 5.0, queue_time_s=0.5, ttft_s=0.5, e2e_s=0.5),
            span("e" * 32, "4", 5.0),  # nobody's trace
        ]
    ).to_pandas()
    stats = join_stats(requests, spans)
    assert stats == {
        "requests_traced": 4,
        "ok_traced": 3,
        "joined": 2,
        "joined_failed_requests": 0,
        "missing": 1,
        "unknown_trace": 1,
        "extra_same_trace": 1,
    }
    out = fill_from_spans(requests, spans).set_index("request_id")
    assert out.loc["r0", "server_timing_source"] == "otlp:vllm"
    assert out.loc["r0", "server_queue_time_s"] == 0.02 and out.loc["r0", "server_ttft_s"] == 0.15
    assert out.loc["r1", "server_timing_source"] == "kvscope" and out.loc["r1", "server_ttft_s"] == 0.1
    assert pd.isna(out.loc["r2", "server_timing_source"]) and math.isnan(out.loc["r2", "server_ttft_s"])
    assert pd.isna(out.loc["r4", "server_timing_source"])


def test_sglang_queue_stage_is_merged_into_its_request_span():
    requests = normalise_requests(pd.DataFrame([record(0, "a" * 32)]))
    spans = spans_table(
        [
            span("a" * 32, "1", 5.0, fmt="sglang", ttft_s=0.3, e2e_s=1.0),
            span("a" * 32, "2", 2.0, fmt="sglang", role="queue_stage", queue_time_s=0.05),
            span("a" * 32, "3", 2.5, fmt="sglang", role="queue_stage", queue_time_s=0.02),
        ]
    ).to_pandas()
    out = fill_from_spans(requests, spans)
    assert out["server_queue_time_s"].iloc[0] == pytest.approx(0.07)
    assert out["server_timing_source"].iloc[0] == "otlp:sglang"
    assert join_stats(requests, spans)["extra_same_trace"] == 0
