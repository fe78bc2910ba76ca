"""The SSE fast path (`sse_blocks.take_lines`: a socket read at a time, typed decoding) makes
the same records as the reference (`sse.consume`: line by line, every chunk a dict), over
recorded stream bytes from real servers and over the odd streams a server may send, cut into
reads every way: one read per event, reads cut at random places (inside lines, inside a
"\\r\\n"), the whole body at once."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import msgspec
import pytest

from harness.workload.record import RequestRecord
from harness.workload.sse import StreamState, consume, finish
from harness.workload.sse_blocks import Chunk, take_lines

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RECORDED = sorted((FIXTURES / "llamacpp").glob("*.sse")) + sorted((FIXTURES / "engine").glob("*.sse"))


def _event(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chat(content, index=0, finish=None, **delta) -> dict:
    return {"choices": [{"index": index, "delta": {"content": content, **delta}, "finish_reason": finish}]}


def _text(text, index=0, finish=None) -> dict:
    return {"id": "c", "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish}]}


USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}
TIMING = {"queue_time_s": 0.01, "ttft_s": 0.03, "e2e_s": 0.2, "num_preemptions": 1, "arrival_unix": 5.0}
DONE = b"data: [DONE]\n\n"
ODD: dict[str, bytes] = {
    "chat with role, empty content and a keep-alive comment": b"".join(
        [
            _event(_chat("", role="assistant")),
            b": keepalive\n\n",
            _event(_chat("a")),
            _event(_chat("")),
            _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
            _event({"choices": [], "usage": USAGE, "kvscope": TIMING}),
            DONE,
        ]
    ),  # fmt: skip
    "two choices interleaved": b"".join(
        [
            _event(_text("a", 0)),
            _event(_text("x", 1)),
            _event(_text("b", 0)),
            _event(_text("y", 1, "stop")),
            _event(_text("c", 0, "length")),
            DONE,
        ]
    ),  # fmt: skip
    "reasoning text, then content": b"".join(
        [
            _event(_chat(None, reasoning_content="think")),
            _event(_chat(None, reasoning="more")),
            _event(_chat(None, reasoning_content="")),
            _event(_chat("answer", finish="stop")),
            DONE,
        ]
    ),  # fmt: skip
    "CRLF line ends, event and id fields, data without a space": (
        b'event: message\r\nid: 1\r\ndata:{"choices":[{"index":0,"text":"a"}]}\r\n\r\n'
        b'data: {"choices":[{"index":0,"text":"b","finish_reason":"stop"}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    ),
    "types the structs do not describe": b"".join(
        [
            _event({"choices": [{"index": None, "text": "a"}]}),
            _event({"choices": [{"index": True, "text": "b"}]}),
            _event({"choices": [{"index": 1.0, "text": "c"}]}),
            _event({"choices": [{"index": 0, "text": 5}]}),
            _event({"choices": [{"index": 0, "delta": {"content": ["x"]}}]}),
            _event({"choices": ["?"]}),
            _event({"choices": {"index": 0}}),
            _event([1, 2]),
            _event(None),
            _event({"usage": [1]}),
            _event({"choices": [{"index": 0, "delta": "x", "text": "d", "finish_reason": 3}]}),
            _event({"choices": [{"index": 0, "text": "e", "finish_reason": "stop"}], "usage": None}),
            DONE,
        ]
    ),  # fmt: skip
    "llama.cpp timings after the kvscope object is ignored": b"".join(
        [
            _event(_text("a")),
            _event({"choices": [], "kvscope": TIMING}),
            _event({"choices": [], "timings": {"prompt_ms": 5.0, "predicted_ms": 9.0}}),
            DONE,
        ]
    ),  # fmt: skip
    "an error event": _event(_text("a")) + _event({"error": {"message": "engine died"}}) + _event(_text("b")),
    "an error event of null": _event(_text("a")) + _event({"error": None, "choices": []}),
    "an error event beside choices is not one": _event({"error": "x", "choices": [{"text": "a"}]}) + DONE,
    "malformed JSON": _event(_text("a")) + b"data: {not json\n\n" + _event(_text("b")) + DONE,
    "cut short: no [DONE], no finish": _event(_text("a")) + _event(_text("b")),
    "cut mid-line at the end": _event(_text("a", finish="stop")) + b'data: {"choices": [{"te',
    "bytes after [DONE] are not read": _event(_text("a", finish="stop")) + DONE + _event(_text("ignored")),
    "finished without text": _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + DONE,
}


def _record() -> RequestRecord:
    return RequestRecord("w-1", "w", "chat", "chat", send_time_unix=0.0)


def _reference(reads: list[tuple[float, bytes]]) -> dict:
    """`sse.consume` over the same bytes: each line is read at the time of the read that
    brought its last byte (a partial last line is never returned, as geventhttpclient's
    readline does at the end of a body)."""
    lines: list[tuple[bytes, float]] = []
    pending = b""
    for t, data in reads:
        pending += data
        *complete, pending = pending.split(b"\n")
        lines += [(line + b"\n", t) for line in complete]
    stream = iter(lines)
    current = [0.0]

    def readline(_sep: bytes) -> bytes:
        line, current[0] = next(stream, (b"", reads[-1][0]))
        return line

    state, rec = StreamState(start=0.0), _record()
    consume(readline, lambda: current[0], state, rec)
    state.end = reads[-1][0]
    finish(state, rec)
    return _comparable(rec)


def _fast(reads: list[tuple[float, bytes]]) -> dict:
    state, rec = StreamState(start=0.0), _record()
    buf = bytearray()
    for t, data in reads:
        buf += data
        if take_lines(buf, t, state, rec):
            break
    state.end = reads[-1][0]
    finish(state, rec)
    return _comparable(rec)


def _comparable(rec: RequestRecord) -> dict:
    return {k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in rec.to_dict().items()}


def _cuts(body: bytes, how: str, rng: random.Random) -> list[tuple[float, bytes]]:
    if how == "whole":
        parts = [body]
    elif how == "per event":
        parts = re.findall(rb".*?\n\r?\n|.+", body, re.S)  # each event with its blank line
    else:
        points = sorted(rng.sample(range(1, len(body)), min(len(body) - 1, len(body) // 7)))
        parts = [body[a:b] for a, b in zip([0, *points], [*points, len(body)])]
    return [(0.01 * (i + 1), p) for i, p in enumerate(parts)]


STREAMS = {p.name: p.read_bytes() for p in RECORDED} | ODD


@pytest.mark.parametrize("how", ["per event", "random cuts", "whole"])
@pytest.mark.parametrize("name", list(STREAMS))
def test_the_fast_path_makes_the_reference_record(name: str, how: str) -> None:
    body = STREAMS[name]
    for seed in range(3 if how == "random cuts" else 1):
        reads = _cuts(body, how, random.Random(seed))
        assert b"".join(p for _, p in reads) == body
        assert _fast(reads) == _reference(reads), (name, how, seed)


def test_the_recorded_streams_are_there_and_take_the_typed_path() -> None:
    """Real servers' chunks fit the structs (the dict fallback is for odd servers only), and
    the recordings are the servers' own: chat and completions, from llama.cpp and the engine."""
    names = {p.name for p in RECORDED}
    assert {"chat_stream_include_usage.sse", "completions_stream_include_usage.sse"} <= names
    assert any(p.parent.name == "engine" and "chat" in p.name for p in RECORDED)
    assert any(p.parent.name == "engine" and "completions" in p.name for p in RECORDED)
    for path in RECORDED:
        for line in path.read_bytes().splitlines():
            if line.startswith(b"data: {"):
                assert isinstance(msgspec.json.decode(line[6:], type=Chunk), Chunk), (path.name, line[:120])


def test_a_record_is_complete_on_both_paths() -> None:
    """Not two equal empty records: the shared streams do produce the fields compared."""
    body = ODD["chat with role, empty content and a keep-alive comment"]
    rec = _fast(_cuts(body, "per event", random.Random(0)))
    assert rec["ok"] and rec["num_chunks"] == 3 and rec["output_tokens"] == 3 and rec["cached_tokens"] == 8
    assert rec["server_ttft_s"] == 0.03 and rec["finish_reason"] == "length" and len(rec["itl_s"]) == 2
