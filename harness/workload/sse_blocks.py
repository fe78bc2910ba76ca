"""The load generator's fast path through a streamed body: every complete line that one socket
read brought, stamped with the time of that read, decoded into structs that keep only the
fields a record needs.

Why: at 256 streams one Locust worker handles ~13,000 chunks a second, and per chunk the
line-by-line reader (`sse.consume` over `readline`) paid for two line searches and copies
(the `data:` line and the blank line after it) and a decode of every field into a dict. Here
one search finds the last complete line of the buffer, and msgspec's typed decoder skips the
fields no record uses (`id`, `model`, `logprobs`, ...): about half the decode time. The
structs are not tracked by the garbage collector (`gc=False`: they hold no cycles), so the
thousands made a second do not trigger collections.

Timing: the lines of one read arrived together, so they share its time, taken right after
the read returned and before any decoding (the line reader stamps each line after the
previous ones were parsed, later by that parsing). Nothing is sampled: every chunk is
decoded and applied.

Same records as the reference (`sse.consume`, every chunk decoded to a dict and applied by
`sse.apply_chunk`): a test replays recorded stream bytes through both. A chunk the structs do
not describe (an `index` that is not an integer, a list where an object belongs) is read by
the reference's own line handling (`sse.take_data`: a dict, `apply_chunk`), so an odd server
costs speed, never a field.
"""

from __future__ import annotations

from typing import Any

import msgspec

from harness.workload.llamacpp_timings import SOURCE, as_server_timing
from harness.workload.record import RequestRecord
from harness.workload.sse import DATA, StreamState, take_data

_NEWLINE = b"\n"
_SKIP = len(DATA)


class Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class Choice(msgspec.Struct, gc=False):
    index: int = 0
    text: str | None = None
    delta: Delta | None = None
    finish_reason: str | None = None


class Chunk(msgspec.Struct, gc=False):
    choices: list[Choice] | None = None
    usage: dict | None = None
    kvscope: dict | None = None
    timings: dict | None = None
    error: Any = msgspec.UNSET  # present (even as null) or not: an error event has it


_typed = msgspec.json.Decoder(Chunk).decode


def apply(state: StreamState, rec: RequestRecord, chunk: Chunk, now: float) -> None:
    """`sse.apply_chunk` for a `Chunk` (the rules are documented there)."""
    choices = chunk.choices
    if chunk.error is not msgspec.UNSET and not choices:
        err = chunk.error
        state.error = (err.get("message") if isinstance(err, dict) else str(err)) or "error event in stream"
        return
    for choice in choices or ():
        delta = choice.delta
        if delta is not None:
            token = delta.content is not None or bool(delta.reasoning_content) or bool(delta.reasoning)
        else:
            token = choice.text is not None
        if token:
            if state.first_token_at is None:
                state.first_token_at = now
            previous = state.last_token_at.get(choice.index)
            if previous is not None:
                rec.itl_s.append(now - previous)
            state.last_token_at[choice.index] = now
            rec.num_chunks += 1
            if state.answer is not None and choice.index == 0:
                text = delta.content if delta is not None else choice.text
                if text is not None:
                    state.answer.append(text)
        if choice.finish_reason is not None:
            state.finish_reasons[choice.index] = choice.finish_reason
    if chunk.usage is not None:
        state.usage = chunk.usage
    if chunk.kvscope is not None:
        state.timing = chunk.kvscope
    elif chunk.timings is not None and (state.timing or {}).get("source") in (None, SOURCE):
        state.timing = as_server_timing(chunk.timings)


def take_lines(buf: bytearray, now: float, state: StreamState, rec: RequestRecord) -> bool:
    """Apply every complete line in `buf` and remove them (a partial last line stays for the
    next read); True when the reader should stop ([DONE], malformed JSON, an error event).

    A chunk is decoded from its line as it is (JSON allows the space after `data:` and a
    trailing "\\r"); whatever does not decode as a `Chunk` — `[DONE]`, malformed JSON, a chunk
    of other types — takes `sse.take_data`, the reference's own handling of a line."""
    end = buf.rfind(_NEWLINE) + 1
    if not end:
        return False
    # bytes, not bytearray slices: msgspec decodes bytes about twice as fast
    block = bytes(buf) if end == len(buf) else bytes(buf[:end])
    del buf[:end]
    for line in block.split(_NEWLINE):
        if not line.startswith(DATA):
            continue
        try:
            chunk = _typed(line[_SKIP:])
        except msgspec.DecodeError:  # ValidationError included: not a Chunk, or not JSON
            if take_data(line, now, state, rec):
                return True
            continue
        apply(state, rec, chunk, now)
        if state.error is not None:
            return True
    return False
