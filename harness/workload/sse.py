"""Read an OpenAI-style SSE stream line by line and time every generated chunk.

Why line reads: geventhttpclient's response buffers when iterated or read(n) — events then
arrive in bursts and TTFT and inter-token gaps are wrong by hundreds of milliseconds with no
error (measured). `readline(b"\\n")` returns
each SSE line as soon as it is on the socket. SSE lines end in `\\n` (geventhttpclient's
default separator is `\\r\\n`, which would never match).

Each line is stamped right after it is read, before JSON decoding, so parsing cost does not
leak into the latency figures. Decoding is msgspec's (about four times json's speed on a
chunk): it is the load generator's hottest line, once per streamed token. Pure: no Locust
import, works on any `readline(sep)` callable.

The load generator itself reads a socket read at a time (`harness.load.stream_body`, into
`sse_blocks`: the same rules, cheaper per chunk); this line reader is the reference that path
is tested against, and what reads a response without geventhttpclient's parser state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from harness.workload.llamacpp_timings import SOURCE, as_server_timing
from harness.workload.record import RequestRecord

DATA = b"data:"
_DONE = b"[DONE]"
_decode = msgspec.json.Decoder().decode  # raises msgspec.DecodeError, a ValueError


@dataclass(slots=True)
class StreamState:
    """What the stream said so far. `last_token_at` is per choice index, so with n > 1 the
    inter-token gaps are gaps within one choice, not between interleaved choices. `answer`,
    when a list (session workloads, which append the answer to the conversation), collects
    choice 0's text: chat `content` or completion `text`, never reasoning text."""

    start: float
    first_token_at: float | None = None
    end: float | None = None
    last_token_at: dict[int, float] = field(default_factory=dict)
    finish_reasons: dict[int, str] = field(default_factory=dict)
    usage: dict | None = None
    timing: dict | None = None
    done: bool = False
    error: str | None = None
    answer: list[str] | None = None


def _is_token(choice: dict) -> bool:
    """Does this chunk choice carry generated output? As vLLM's own benchmark decides: a chat
    delta whose `content` is a string — even "" — or that has reasoning text, or a completion
    choice with a `text` string. The empty string matters: a token that ends mid-character
    (byte-level tokenizers) streams as "" while its bytes wait for the rest of the character,
    and vLLM's first chunk (role plus content "") goes out with the first token. A chunk
    with `delta: {}` (only a finish_reason) is not a token."""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        if isinstance(delta.get("content"), str):
            return True
        return any(isinstance(delta.get(k), str) and delta.get(k) for k in ("reasoning_content", "reasoning"))
    return isinstance(choice.get("text"), str)


def apply_chunk(state: StreamState, rec: RequestRecord, chunk: dict, now: float) -> None:
    if "error" in chunk and not chunk.get("choices"):
        err = chunk["error"]
        state.error = (err.get("message") if isinstance(err, dict) else str(err)) or "error event in stream"
        return
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        index = choice.get("index", 0) if isinstance(choice.get("index", 0), int) else 0
        if _is_token(choice):
            if state.first_token_at is None:
                state.first_token_at = now
            previous = state.last_token_at.get(index)
            if previous is not None:
                rec.itl_s.append(now - previous)
            state.last_token_at[index] = now
            rec.num_chunks += 1
            if state.answer is not None and index == 0:
                delta = choice.get("delta")
                text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
                if isinstance(text, str):
                    state.answer.append(text)
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            state.finish_reasons[index] = reason
    if isinstance(chunk.get("usage"), dict):
        state.usage = chunk["usage"]
    if isinstance(chunk.get("kvscope"), dict):
        state.timing = chunk["kvscope"]
    elif isinstance(chunk.get("timings"), dict) and (state.timing or {}).get("source") in (None, SOURCE):
        state.timing = as_server_timing(chunk["timings"])  # llama.cpp: the last chunk's wins


def consume(
    readline: Callable[[bytes], bytes], clock: Callable[[], float], state: StreamState, rec: RequestRecord
) -> None:
    """Read until `[DONE]` or end of body. Exceptions from `readline` propagate (the caller
    classifies them); malformed JSON is a stream error, recorded in `state.error`."""
    while True:
        line = readline(b"\n")
        now = clock()
        if not line:
            break
        if not line.startswith(DATA):
            continue  # blank separator, comment (":"), or event:/id:/retry: fields
        if take_data(line, now, state, rec):
            break
    state.end = clock()


def take_data(line: bytes, now: float, state: StreamState, rec: RequestRecord) -> bool:
    """One `data:` line; True when the reader should stop ([DONE], malformed JSON, an error
    event)."""
    payload = line[len(DATA) :].strip()
    if payload == _DONE:
        state.done = True
        return True
    try:
        chunk = _decode(payload)
    except ValueError:
        state.error = f"malformed SSE data: {bytes(payload[:80])!r}"
        return True
    if isinstance(chunk, dict):
        apply_chunk(state, rec, chunk, now)
    return state.error is not None


def finish(state: StreamState, rec: RequestRecord) -> None:
    """Turn the stream state into the record's timings, token counts and error class."""
    rec.e2e_s = (state.end or state.start) - state.start
    if state.first_token_at is not None:
        rec.ttft_s = state.first_token_at - state.start
    if state.finish_reasons:
        reasons = sorted(set(state.finish_reasons.values()))
        rec.finish_reason = reasons[0] if len(reasons) == 1 else ",".join(reasons)
    usage = state.usage
    if usage and isinstance(usage.get("completion_tokens"), int):
        rec.usage_source = "server"
        rec.output_tokens = usage["completion_tokens"]
        rec.prompt_tokens = (
            usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None
        )
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            rec.cached_tokens = details["cached_tokens"]
    else:
        rec.usage_source = "client_count"
        rec.output_tokens = rec.num_chunks
    if state.timing:
        rec.apply_server_timing(state.timing)
        if rec.cached_tokens is None:  # one column for every server's report (see the record)
            rec.cached_tokens = rec.server_cached_prompt_tokens
    if state.error:
        rec.set_error("stream_error", state.error)
    elif not state.done and not state.finish_reasons:
        rec.set_error("stream_error", "stream ended before [DONE] and before any choice finished")
    elif rec.num_chunks == 0 and (rec.output_tokens or 0) == 0:
        rec.set_error("no_tokens", f"stream finished ({rec.finish_reason}) without generated text")
    else:
        rec.ok = rec.error_class is None
