"""Server-sent events for `stream: true`: one `data: {json}` event per choice per step, the
final chunk carrying `kvscope` (and `usage` with `stream_options.include_usage`), then
`data: [DONE]`.

All events a step produced for this request go out in one write, so the number of writes
per second scales with steps, not tokens x choices. After each write carrying tokens, the
delay since the core produced them goes to `kvscope:stream_write_delay_seconds`. A write to a
client that has gone away raises ConnectionResetError; the handler then returns and its
`release` aborts the request.

Chunk rules (as OpenAI and vLLM): a chat choice's first chunk carries `role`; a choice's last
chunk carries its `finish_reason`; with `include_usage` every chunk has `"usage": null` and an
extra last chunk has empty `choices` and the usage. With `echo`, a completion choice's first
chunk starts with the prompt (and its logprobs, the first being null).
"""

from __future__ import annotations

import time

import msgspec
from aiohttp import web

from reference_engine.server.events import Delta, Event, Failed, Outcome, PromptLogprobs, RequestStream
from reference_engine.server.generation import Generation
from reference_engine.server.responses import (
    CompletionLogprobs,
    chat_chunk,
    chat_logprobs,
    completion_choice,
    completion_chunk,
    completion_logprobs,
    usage_chunk,
)
from reference_engine.server.state import STATE

SSE_HEADERS = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
_DONE = b"data: [DONE]\n\n"


def _sse(obj: dict) -> bytes:
    # msgspec: compact UTF-8 JSON like json.dumps(separators=(",", ":"), ensure_ascii=False),
    # an order of magnitude faster (one chunk per stream per step adds up at hundreds of
    # streams); a non-finite float becomes null, where json.dumps would write invalid JSON.
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


class _ChunkBuilder:
    """Per-request streaming state: which choices have started, completion text offsets."""

    def __init__(self, gen: Generation):
        self.gen = gen
        self.started = [False] * gen.req.params.n
        self.offsets = [0] * gen.req.params.n

    def delta(self, ev: Delta) -> dict:
        gen, req = self.gen, self.gen.req
        first = not self.started[ev.index]
        self.started[ev.index] = True
        if gen.chat:
            delta = {"role": "assistant", "content": ev.text} if first else {"content": ev.text}
            lps = None if req.logprobs is None else chat_logprobs(ev.logprobs, gen.texts)
            return chat_chunk(gen.rid, gen.created, gen.model, ev.index, delta, lps, ev.finish_reason)
        ids, lps, text = ev.token_ids, ev.logprobs, ev.text
        if req.score_only:
            ids, lps, text = [], [], ""
        lp_obj = None
        if req.logprobs is not None:
            acc = None
            if first and req.echo:
                acc = completion_logprobs(gen.prompt_ids, gen.echo_logprobs(), gen.texts)
            acc = completion_logprobs(
                ids, lps, gen.texts, acc=acc or CompletionLogprobs(offset=self.offsets[ev.index])
            )
            self.offsets[ev.index] = acc.offset
            lp_obj = acc.as_dict()
        if first and req.echo:
            text = gen.prompt_text + text
        reason = "length" if req.score_only and ev.finish_reason else ev.finish_reason
        return completion_chunk(
            gen.rid, gen.created, gen.model, completion_choice(ev.index, text, lp_obj, reason)
        )


async def stream_sse(
    request: web.Request, gen: Generation, stream: RequestStream, events: list[Event]
) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    builder = _ChunkBuilder(gen)
    include_usage = gen.req.include_usage
    metrics = request.app[STATE].metrics
    timing_object = request.app[STATE].config.timing_object
    try:
        while True:
            chunks: list[dict] = []
            done = False
            for event in events:
                if isinstance(event, Delta):
                    chunk = builder.delta(event)
                    if include_usage:
                        chunk["usage"] = None
                    chunks.append(chunk)
                elif isinstance(event, PromptLogprobs):
                    gen.prompt_logprobs = event.by_position
                elif isinstance(event, Outcome):
                    done = True
                    if include_usage or not chunks:
                        chunks.append(
                            usage_chunk(gen.rid, gen.created, gen.model, gen.chat, event, gen.req.score_only)
                        )
                        if not include_usage:
                            del chunks[-1]["usage"]
                    if timing_object:
                        chunks[-1]["kvscope"] = event.timing.as_dict()
                elif isinstance(event, Failed):
                    done = True
                    chunks.append(event.error.body())
            payload = b"".join(_sse(c) for c in chunks)
            if done:
                payload += _DONE
            if payload:
                await response.write(payload)
                if stream.produced:
                    metrics.observe_write_delay(time.monotonic() - stream.produced)
            if done:
                break
            events = await stream.next_events()
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client left; the caller's release() aborts the request
    return response
