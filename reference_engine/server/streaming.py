"""Server-sent events for `stream: true`: one `data: {json}` event per choice per step, the
final chunk carrying `kvscope` (and `usage` with `stream_options.include_usage`), then
`data: [DONE]`.

All events a step produced for this request go out in one write, so the number of writes
per second scales with steps, not tokens x choices. The write happens in the output
processor's pass over the step (`_SseWriter.write_now`, the stream's sink), without waking the
handler: at hundreds of streams a task switch per stream per step was a large share of the
server's time, and the last stream waited for every switch before it. After each write
carrying tokens, the delay since the core produced them goes to
`kvscope:stream_write_delay_seconds`. A client that has gone away ends the handler, whose
`release` aborts the request.

Chunk rules (as OpenAI and vLLM): a chat choice's first chunk carries `role`; a choice's last
chunk carries its `finish_reason`; with `include_usage` every chunk has `"usage": null` and an
extra last chunk has empty `choices` and the usage. With `echo`, a completion choice's first
chunk starts with the prompt (and its logprobs, the first being null).
"""

from __future__ import annotations

import time

import msgspec
from aiohttp import hdrs, web

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
# Unsent bytes on a connection above which chunks wait for the handler's draining write.
DIRECT_BUFFER_LIMIT = 1 << 16


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


class _SseWriter:
    """One response's chunks: `render` turns a batch of events into bytes, `write_now` writes
    them from the output processor's pass (the stream's sink), `write` from the handler.

    `write_now` writes to the transport itself, framed as the response's transfer encoding
    (aiohttp's writer would make it a coroutine per chunk). It declines, so the batch queues
    for the handler, while the transport holds more than `DIRECT_BUFFER_LIMIT` unsent bytes (a
    client that reads slowly gets the handler's draining write: backpressure, not an
    ever-growing buffer) or is gone (the handler's write raises ConnectionResetError and ends
    it). Its delay observations wait until the pass is over (`defer`)."""

    def __init__(
        self, request: web.Request, response: web.StreamResponse, gen: Generation, stream: RequestStream
    ):
        self.request = request
        self.response = response
        self.gen = gen
        self.stream = stream
        self.builder = _ChunkBuilder(gen)
        state = request.app[STATE]
        self.metrics = state.metrics
        self.timing_object = state.config.timing_object
        self.defer = state.engine.processor.defer
        self.chunked = response.headers.get(hdrs.TRANSFER_ENCODING, "").lower() == "chunked"
        self.done = False  # the terminal events were written

    def render(self, events: list[Event]) -> bytes:
        """The batch's chunks, ending with `[DONE]` when it holds the terminal event."""
        gen, builder = self.gen, self.builder
        was_done = self.done
        include_usage = gen.req.include_usage
        chunks: list[dict] = []
        for event in events:
            if isinstance(event, Delta):
                chunk = builder.delta(event)
                if include_usage:
                    chunk["usage"] = None
                chunks.append(chunk)
            elif isinstance(event, PromptLogprobs):
                gen.prompt_logprobs = event.by_position
            elif isinstance(event, Outcome):
                self.done = True
                if include_usage or not chunks:
                    chunks.append(
                        usage_chunk(gen.rid, gen.created, gen.model, gen.chat, event, gen.req.score_only)
                    )
                    if not include_usage:
                        del chunks[-1]["usage"]
                if self.timing_object:
                    chunks[-1]["kvscope"] = event.timing.as_dict()
            elif isinstance(event, Failed):
                self.done = True
                chunks.append(event.error.body())
        payload = b"".join(_sse(c) for c in chunks)
        return payload + _DONE if self.done and not was_done else payload

    def write_now(self, produced: float, events: list[Event]) -> bool:
        transport = self.request.transport
        if (
            transport is None
            or transport.is_closing()
            or transport.get_write_buffer_size() > DIRECT_BUFFER_LIMIT
        ):
            return False
        payload = self.render(events)
        if payload:
            transport.write(b"%x\r\n%b\r\n" % (len(payload), payload) if self.chunked else payload)
            if produced:
                self.defer(self.metrics.observe_write_delay, time.monotonic() - produced)
        if self.done:
            self.stream.queue.put_nowait((0.0, []))  # wake the handler to finish the response
        return True

    async def write(self, produced: float, events: list[Event]) -> None:
        payload = self.render(events)
        if payload:
            await self.response.write(payload)
            if produced:
                self.metrics.observe_write_delay(time.monotonic() - produced)


async def stream_sse(
    request: web.Request, gen: Generation, stream: RequestStream, events: list[Event]
) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    # aiohttp holds the headers back to send them with the first chunk; chunks written
    # straight to the transport must follow them.
    send_headers = getattr(request.writer, "send_headers", None)
    if send_headers is not None:
        send_headers()
    writer = _SseWriter(request, response, gen, stream)
    try:
        await writer.write(stream.produced, events)
        while not writer.done:
            stream.sink = writer.write_now
            try:
                events = await stream.next_events()
            finally:
                stream.sink = None
            await writer.write(stream.produced, events)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client left; the caller's release() aborts the request
    return response
