"""llama.cpp's streamed responses (real captures, tests/fixtures/llamacpp) through the SSE
reader: TTFT at the first chunk with content (the role chunk comes before prefill), usage,
and the final chunk's `timings` in the record's server fields, without a queue time."""

from __future__ import annotations

import math

import pytest

from harness.workload.llamacpp_timings import as_server_timing
from harness.workload.record import RequestRecord
from harness.workload.sse import StreamState, consume, finish
from tests.support.paths import ROOT

CAPTURES = ROOT / "tests" / "fixtures" / "llamacpp"


def read_capture(name: str, endpoint: str = "chat") -> RequestRecord:
    """Feed a capture line by line; the clock advances 10 ms per line read."""
    lines = iter((CAPTURES / name).read_bytes().splitlines(keepends=True))
    ticks = iter(i * 0.01 for i in range(1, 10_000))
    state, rec = StreamState(start=0.0), RequestRecord("w-1", "w", "chat", endpoint, send_time_unix=0.0)  # type: ignore[arg-type]
    consume(lambda sep: next(lines, b""), lambda: next(ticks), state, rec)
    finish(state, rec)
    return rec


def test_streamed_chat_with_usage() -> None:
    rec = read_capture("chat_stream_include_usage.sse")
    assert rec.ok and rec.finish_reason == "stop"
    assert (rec.prompt_tokens, rec.output_tokens, rec.cached_tokens) == (63, 17, 44)
    assert rec.ttft_s == pytest.approx(0.03)  # line 3: the first content chunk, not the role chunk at 0.01
    assert rec.server_prefill_time_s == rec.server_ttft_s == pytest.approx(0.150006)
    assert rec.server_decode_time_s == pytest.approx(0.185404)
    assert rec.server_e2e_s == pytest.approx(0.150006 + 0.185404)
    assert rec.server_cached_prompt_tokens == 44
    assert math.isnan(rec.server_queue_time_s) and rec.server_num_preemptions is None


def test_timings_ride_on_the_finish_chunk_without_usage() -> None:
    rec = read_capture("chat_stream_no_usage.sse")
    assert rec.ok and rec.usage_source == "client_count"
    assert rec.server_cached_prompt_tokens == 44 and rec.server_prefill_time_s == pytest.approx(0.098926)


def test_streamed_completions() -> None:
    rec = read_capture("completions_stream_include_usage.sse", "completions")
    assert rec.ok and rec.output_tokens == 8 and rec.server_cached_prompt_tokens == 0
    assert rec.server_prefill_time_s > 0 and rec.server_decode_time_s > 0


def test_partial_or_odd_timings() -> None:
    assert as_server_timing({"prompt_ms": 12.0}) == {
        "source": "llamacpp",
        "prefill_time_s": 0.012,
        "ttft_s": 0.012,
    }
    assert as_server_timing({"prompt_ms": -1, "cache_n": True}) == {"source": "llamacpp"}
    rec = RequestRecord("w-1", "w", "chat", "chat", send_time_unix=0.0)
    rec.apply_server_timing(as_server_timing({"prompt_ms": 5, "predicted_ms": 7, "cache_n": 3}))
    assert (rec.server_ttft_s, rec.server_e2e_s, rec.server_cached_prompt_tokens) == (0.005, 0.012, 3)
