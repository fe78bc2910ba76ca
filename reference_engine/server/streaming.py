"""Server-sent events for `stream: true`: one `data: {json}` event per choice per step, the
final chunk carrying `kvscope` (and `usage` with `stream_options.include_usage`), then
`data: [DONE]`.

All events a step produced for this request go out in one write (an ended request's outcome,
its usage, `kvscope` object and `[DONE]`, in a second one once every stream has its tokens of
the step), so the number of writes per second scales with steps, not tokens x choices. The
write happens in the output
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


_encode = msgspec.json.encode
# A text no model emits, so where its JSON lands in a rendered chunk is where a text goes.
_PROBE = "\x00kvscope-probe\x00"


def _sse(obj: dict) -> bytes:
    # msgspec: compact UTF-8 JSON like json.dumps(separators=(",", ":"), ensure_ascii=False),
    # an order of magnitude faster (one chunk per stream per step adds up at hundreds of
    # streams); a non-finite float becomes null, where json.dumps would write invalid JSON.
    return b"data: " + _encode(obj) + b"\n\n"


class _ChunkBuilder:
    """Per-request streaming state: which choices have started, completion text offsets, and
    the templates of plain chunks.

    A plain chunk is a delta of text only: no logprobs, not a choice's last (its finish_reason
    is null). Most chunks of a stream are plain, and rendering one from its template is one
    JSON string encode instead of two dicts and a JSON encode. The templates are the bytes
    before and after the text, cut from a chunk `_chunk` itself renders around a probe text, so
    the two cannot disagree; they are made when the response starts, not in the output
    processor's pass, and are False where the text is not simply there (echo's first chunk,
    `score_only`)."""

    def __init__(self, gen: Generation):
        self.gen = gen
        n = gen.req.params.n
        self.started = [False] * n
        self.offsets = [0] * n
        # Per choice: (first chunk's template, later chunks' template); None with logprobs.
        self.templates = (
            None
            if gen.req.logprobs is not None
            else [(self._template(i, first=True), self._template(i, first=False)) for i in range(n)]
        )

    def delta(self, ev: Delta) -> dict:
        first = not self.started[ev.index]
        self.started[ev.index] = True
        return self._chunk(ev, first)

    def plain(self, ev: Delta) -> bytes | None:
        """`ev`'s SSE event from its template, or None where it has none."""
        return None if ev.finish_reason is not None else self.text_chunk(ev.index, ev.text)

    def text_chunk(self, index: int, text: str) -> bytes | None:
        """Choice `index`'s next SSE event when it is only `text`, from its template; None
        where there is none."""
        if self.templates is None:
            return None
        template = self.templates[index][1 if self.started[index] else 0]
        if not template:
            return None
        self.started[index] = True
        return template[0] + _encode(text) + template[1]

    def _template(self, index: int, first: bool) -> tuple[bytes, bytes] | bool:
        parts = _sse(self._chunk(Delta(index, [], _PROBE, [], None), first)).split(_encode(_PROBE))
        return (parts[0], parts[1]) if len(parts) == 2 else False

    def _chunk(self, ev: Delta, first: bool) -> dict:
        gen, req = self.gen, self.gen.req
        if gen.chat:
            delta = {"role": "assistant", "content": ev.text} if first else {"content": ev.text}
            lps = None if req.logprobs is None else chat_logprobs(ev.logprobs, gen.texts)
            chunk = chat_chunk(gen.rid, gen.created, gen.model, ev.index, delta, lps, ev.finish_reason)
        else:
            chunk = self._completion_chunk(ev, first)
        if req.include_usage:
            chunk["usage"] = None
        return chunk

    def _completion_chunk(self, ev: Delta, first: bool) -> dict:
        gen, req = self.gen, self.gen.req
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
    them from the output processor's pass (the stream's sink), `write` from the handler;
    `write_text` (the stream's text sink) writes a one-choice stream's next token from its text
    alone, which is most of what a stream writes.

    `write_now` writes to the transport itself, framed as the response's transfer encoding
    (aiohttp's writer would make it a coroutine per chunk). It declines, so the batch queues
    for the handler, while the transport holds more than `DIRECT_BUFFER_LIMIT` unsent bytes (a
    client that reads slowly gets the handler's draining write: backpressure, not an
    ever-growing buffer) or is gone (the handler's write raises ConnectionResetError and ends
    it). Its delay observations wait until the pass is over (`OutputProcessor.write_delays`)."""

    def __init__(
        self, request: web.Request, response: web.StreamResponse, gen: Generation, stream: RequestStream
    ):
        self.response = response
        self.gen = gen
        self.stream = stream
        self.builder = _ChunkBuilder(gen)
        self.transport = request.transport  # aiohttp's property costs, once per chunk
        state = request.app[STATE]
        self.metrics = state.metrics
        self.timing_object = state.config.timing_object
        self.note_write_delay = state.engine.processor.write_delays.append
        self.chunked = response.headers.get(hdrs.TRANSFER_ENCODING, "").lower() == "chunked"
        self.done = False  # the terminal events were written
        self.carried_tokens = False  # the last rendered batch had a delta chunk
        # The outcome comes in a batch of its own after the last delta (`OutputProcessor`).
        # Without include_usage the kvscope object rides on the last choice's last chunk, so
        # that chunk waits for it here.
        self.unfinished = gen.req.params.n
        self.hold_last = self.timing_object and not gen.req.include_usage
        self.held: dict | None = None
        # A one-choice stream's later chunks' template: once its first chunk is out, the
        # stream's text sink is `write_text` (installed by `render`).
        templates = self.builder.templates
        self.text_lane = (
            templates[0][1] if gen.req.params.n == 1 and templates is not None and templates[0][1] else None
        )

    def render(self, events: list[Event]) -> bytes:
        """The batch's chunks, ending with `[DONE]` when it holds the terminal event."""
        builder, gen = self.builder, self.gen
        was_done = self.done
        self.carried_tokens = False
        chunks: list[dict | bytes] = []  # bytes: a plain chunk, already rendered
        for event in events:
            if isinstance(event, Delta):
                self.carried_tokens = True
                plain = builder.plain(event)
                if plain is not None:
                    chunks.append(plain)
                    continue
                chunk = builder.delta(event)
                if event.finish_reason is not None:
                    self.unfinished -= 1
                    if self.unfinished == 0 and self.hold_last:
                        self.held = chunk
                        continue
                chunks.append(chunk)
            elif isinstance(event, PromptLogprobs):
                gen.prompt_logprobs = event.by_position
            elif isinstance(event, Outcome):
                self.done = True
                if self.held is not None:
                    chunks.append(self.held)
                    self.held, self.carried_tokens = None, True
                include_usage = gen.req.include_usage
                if include_usage or (self.timing_object and not chunks):
                    chunks.append(
                        usage_chunk(gen.rid, gen.created, gen.model, gen.chat, event, gen.req.score_only)
                    )
                    if not include_usage:
                        del chunks[-1]["usage"]
                if self.timing_object:
                    chunks[-1]["kvscope"] = event.timing.as_dict()  # the choice's last delta: a dict
            elif isinstance(event, Failed):
                self.done = True
                if self.held is not None:
                    chunks.append(self.held)
                    self.held = None
                chunks.append(event.error.body())
        if self.text_lane is not None and builder.started[0] and not self.done:
            self.stream.text_sink = self.write_text
        payload = b"".join([c if type(c) is bytes else _sse(c) for c in chunks])
        return payload + _DONE if self.done and not was_done else payload

    def write_now(self, produced: float, events: list[Event]) -> bool:
        if not self._writable():
            return False
        payload = self.render(events)
        if payload:
            self._send(payload, produced if self.carried_tokens else 0.0)
        if self.done:
            self.stream.sink = None
            self.stream.queue.put_nowait((0.0, []))  # wake the handler to finish the response
        return True

    def write_text(self, produced: float, text: str) -> bool:
        """The stream's `text_sink` once its first chunk is out (one choice only): its text
        as a later chunk, from the template."""
        if not self._writable():
            return False
        prefix, suffix = self.text_lane
        self._send(prefix + _encode(text) + suffix, produced)
        return True

    def _writable(self) -> bool:
        transport = self.transport
        return not (
            transport is None
            or transport.is_closing()
            or transport.get_write_buffer_size() > DIRECT_BUFFER_LIMIT
        )

    def _send(self, payload: bytes, produced: float) -> None:
        self.transport.write(b"%x\r\n%b\r\n" % (len(payload), payload) if self.chunked else payload)
        if produced:
            self.note_write_delay(time.monotonic() - produced)

    async def write(self, produced: float, events: list[Event]) -> None:
        payload = self.render(events)
        if payload:
            await self.response.write(payload)
            if produced and self.carried_tokens:
                self.metrics.observe_write_delays((time.monotonic() - produced,))


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
