"""What session workloads take from a stream besides timings: the answer's text (appended to
the conversation) and the cached prompt tokens in one column whichever report a server gave.
Both SSE readers, on recorded streams from real servers and the odd ones, cut every way."""

from __future__ import annotations

import json
import random

import pytest

from harness.workload.record import RequestRecord
from harness.workload.sse import StreamState, consume, finish
from harness.workload.sse_blocks import take_lines
from tests.harness.workload.test_sse_blocks import FIXTURES, STREAMS, _cuts


def _answer_of(body: bytes) -> str:
    """Choice 0's content (chat) or text (completions), read with json, independently."""
    out = []
    for line in body.split(b"\n"):
        line = line.strip()
        if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
            continue
        try:
            chunk = json.loads(line[5:])
        except ValueError:
            break
        if not isinstance(chunk, dict) or (chunk.get("error") is not None and not chunk.get("choices")):
            break
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
            if isinstance(text, str):
                out.append(text)
    return "".join(out)


def _read(reads, fast: bool) -> tuple[str, RequestRecord]:
    state, rec = StreamState(start=0.0, answer=[]), RequestRecord("w-1", "w", "chat", "chat", 0.0)
    if fast:
        buf = bytearray()
        for t, data in reads:
            buf += data
            if take_lines(buf, t, state, rec):
                break
    else:
        lines = iter(line + b"\n" for line in b"".join(d for _, d in reads).split(b"\n")[:-1])
        consume(lambda _sep: next(lines, b""), lambda: 0.0, state, rec)
    finish(state, rec)
    return "".join(state.answer or ()), rec


RECORDED = [name for name in STREAMS if name.endswith(".sse")]


@pytest.mark.parametrize("name", RECORDED)
def test_both_readers_collect_the_answer_of_a_recorded_stream(name: str) -> None:
    body = STREAMS[name]
    expected = _answer_of(body)
    assert expected.strip(), name  # real servers' streams carry text
    for how in ("per event", "random cuts", "whole"):
        reads = _cuts(body, how, random.Random(1))
        assert _read(reads, fast=True)[0] == expected == _read(reads, fast=False)[0], (name, how)


@pytest.mark.parametrize("name", [n for n in STREAMS if not n.endswith(".sse")])
def test_both_readers_agree_on_the_answer_of_odd_streams(name: str) -> None:
    reads = _cuts(STREAMS[name], "per event", random.Random(0))
    assert _read(reads, fast=True)[0] == _read(reads, fast=False)[0], name


def test_a_reader_without_an_answer_list_keeps_none() -> None:
    state = StreamState(start=0.0)
    buf = bytearray(STREAMS["chat_stream_include_usage.sse"])
    take_lines(buf, 0.0, state, RequestRecord("w-1", "w", "chat", "chat", 0.0))
    assert state.answer is None


def test_cached_tokens_come_from_usage_else_from_the_servers_timings() -> None:
    """llama.cpp states them twice (usage details and `cache_n`); without usage only its
    timings carry them, and the one column still has them."""
    with_usage = (FIXTURES / "llamacpp" / "chat_stream_include_usage.sse").read_bytes()
    without = (FIXTURES / "llamacpp" / "chat_stream_no_usage.sse").read_bytes()
    _, rec = _read(_cuts(with_usage, "whole", random.Random(0)), fast=True)
    assert rec.cached_tokens == 44 == rec.server_cached_prompt_tokens and rec.usage_source == "server"
    _, rec = _read(_cuts(without, "whole", random.Random(0)), fast=True)
    assert rec.usage_source == "client_count" and rec.cached_tokens == 44 == rec.server_cached_prompt_tokens
