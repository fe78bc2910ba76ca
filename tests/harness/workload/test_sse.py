"""The SSE reader: what a streamed response's chunks make of a request record (timing,
token counts, server timings, error classes)."""

from __future__ import annotations

import json

import pytest

from harness.workload.record import RequestRecord
from harness.workload.sse import StreamState, consume, finish


def _rec() -> RequestRecord:
    return RequestRecord("w-1", "w", "chat", "chat", send_time_unix=0.0)


def _feed(lines: list[bytes], times: list[float]) -> tuple[StreamState, RequestRecord]:
    """Run `consume` over canned lines; the clock returns `times` in order (one per read)."""
    it, clock = iter(lines), iter(times)
    state, rec = StreamState(start=0.0), _rec()
    consume(lambda sep: next(it, b""), lambda: next(clock), state, rec)
    finish(state, rec)
    return state, rec


def _data(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n"


def _chat(text, index=0, finish_reason=None, role=False):
    delta = {"role": "assistant", "content": text} if role else {"content": text}
    return {"choices": [{"index": index, "delta": delta, "finish_reason": finish_reason}]}


def test_stream_timing_usage_and_server_timings() -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}
    timing = {
        "queue_time_s": 0.01,
        "prefill_time_s": 0.02,
        "ttft_s": 0.03,
        "decode_time_s": 0.2,
        "e2e_s": 0.23,
        "num_preemptions": 1,
        "cached_prompt_tokens": 8,
        "arrival_unix": 1.0,
    }
    lines = [
        _data(_chat("", role=True)),
        b"\n",
        _data(_chat("a")),
        b"\n",
        _data(_chat("")),
        b": keepalive\n",
        _data(_chat("c")),
        _data({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
        _data({"choices": [], "usage": usage, "kvscope": timing}),
        b"data: [DONE]\n",
    ]
    _, rec = _feed(lines, [0.05, 0.05, 0.10, 0.10, 0.25, 0.25, 0.40, 0.41, 0.42, 0.43, 0.44])
    assert rec.ok and rec.error_class is None
    assert rec.ttft_s == pytest.approx(0.05)  # role + "" goes out with the first token (vLLM, byte tokens)
    assert rec.itl_s == pytest.approx([0.05, 0.15, 0.15])  # "" mid-character tokens count; delta {} does not
    assert rec.e2e_s == pytest.approx(0.44)
    assert (rec.prompt_tokens, rec.output_tokens, rec.cached_tokens, rec.usage_source) == (12, 3, 8, "server")
    assert rec.finish_reason == "length" and rec.num_chunks == 4
    assert rec.server_ttft_s == 0.03 and rec.server_num_preemptions == 1


def test_stream_parallel_choices_have_per_choice_gaps() -> None:
    lines = [
        _data(_chat("a", 0)),
        _data(_chat("x", 1)),
        _data(_chat("b", 0)),
        _data(_chat("y", 1, "stop")),
        _data(_chat("c", 0, "stop")),
        b"data: [DONE]\n",
    ]
    _, rec = _feed(lines, [0.1, 0.1, 0.3, 0.35, 0.5, 0.6, 0.7])
    assert rec.itl_s == pytest.approx([0.2, 0.25, 0.2])
    assert rec.usage_source == "client_count" and rec.output_tokens == 5 and rec.prompt_tokens is None


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        ([_data({"error": {"message": "engine died"}})], "stream_error"),
        ([b"data: {not json\n"], "stream_error"),
        (
            [_data({"choices": [{"index": 0, "text": "a", "finish_reason": None}]})],
            "stream_error",
        ),  # cut, no [DONE]
        (
            [_data({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}), b"data: [DONE]\n"],
            "no_tokens",
        ),
    ],
)
def test_stream_errors_are_classified(lines, error) -> None:
    _, rec = _feed(lines, [0.1] * (len(lines) + 2))
    assert not rec.ok and rec.error_class == error
