"""The two generation endpoints: parse, tokenize, hand to the engine, answer.

Order of checks (each a 4xx before anything reaches the engine): JSON, fields, model name,
chat template, token ids, context length, then the engine's own admission checks (e.g. a
request larger than the whole KV pool), which `AsyncEngine.submit` runs before the request
leaves for the core. A refusal by the core itself still comes back as the stream's first
event, before any response bytes are sent.

Whatever way a handler ends (finished, client gone, cancelled), `release` runs: a request the
client no longer waits for is aborted in the engine and its KV blocks freed at once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from aiohttp import web

from reference_engine.engine import TokenLogprob
from reference_engine.server.errors import bad_request, model_not_found
from reference_engine.server.events import (
    Delta,
    Event,
    Failed,
    Outcome,
    PromptLogprobs,
    RequestStream,
    Submission,
)
from reference_engine.server.generation import Generation
from reference_engine.server.protocol import (
    GenerateRequest,
    decode_body,
    finalize_max_tokens,
    parse_chat,
    parse_completion,
)
from reference_engine.server.responses import (
    chat_choice,
    chat_logprobs,
    chat_response,
    completion_choice,
    completion_logprobs,
    completion_response,
)
from reference_engine.server.state import STATE, ServerState
from reference_engine.server.streaming import stream_sse
from reference_engine.server.timing import HEADER


def _encode_template_text(tokenizer, text: str) -> list[int]:
    """The chat template already writes any BOS the model wants; do not add a second one."""
    try:
        return tokenizer.encode(text, add_special_tokens=False)
    except TypeError:  # a tokenizer without the keyword (test doubles, simple tokenizers)
        return tokenizer.encode(text)


def tokenize(req: GenerateRequest, state: ServerState) -> tuple[list[int], str]:
    tokenizer = state.tokenizer
    if req.kind == "chat":
        try:
            text = tokenizer.apply_chat_template(req.prompt, add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - template errors (jinja2, raise_exception) are the messages' fault
            raise bad_request(
                f"The messages cannot be rendered with this model's chat template: {exc}", "messages"
            ) from None
        ids = _encode_template_text(tokenizer, text)
        return ids, text
    if isinstance(req.prompt, str):
        if not req.prompt:
            raise bad_request("The prompt is empty.", "prompt")
        return tokenizer.encode(req.prompt), req.prompt
    ids = list(req.prompt)
    if any(not 0 <= t < state.vocab_size for t in ids):
        raise bad_request(f"Prompt token ids must be in [0, {state.vocab_size}).", "prompt")
    return ids, tokenizer.decode(ids)


def check_model(name: str | None, state: ServerState) -> str:
    served = state.config.served_model_name
    if name is not None and name != served:
        raise model_not_found(name, served)
    return served


async def handle_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, parse_completion, "cmpl")


async def handle_chat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, parse_chat, "chatcmpl")


async def _generate(
    request: web.Request, parse: Callable[[dict], GenerateRequest], prefix: str
) -> web.StreamResponse:
    arrival, arrival_unix = time.monotonic(), time.time()
    state = request.app[STATE]
    await state.turns.take()
    state.engine.route_waiting()
    req = parse(decode_body(await request.read()))
    model = check_model(req.model, state)
    prompt_ids, prompt_text = tokenize(req, state)
    finalize_max_tokens(req, len(prompt_ids), state.max_model_len)
    gen = Generation(
        f"{prefix}-{uuid.uuid4().hex}",
        int(arrival_unix),
        model,
        req,
        prompt_ids,
        prompt_text,
        state.token_texts,
    )
    stream = state.engine.submit(Submission(gen.rid, prompt_ids, req.params, arrival, arrival_unix))
    try:
        events = await stream.next_events()
        if isinstance(events[0], Failed):  # refused by the core
            raise events[0].error
        if req.stream:
            response = await stream_sse(request, gen, stream, events[1:])
        else:
            response = await _collect(gen, stream, events[1:], state.config.timing_object)
        if state.config.tracer is not None and stream.outcome is not None:
            state.config.tracer.emit(request.headers, gen.rid, req.params, stream.outcome)
        return response
    finally:
        state.engine.release(stream)


async def _collect(
    gen: Generation, stream: RequestStream, events: list[Event], timing_object: bool
) -> web.Response:
    n = gen.req.params.n
    texts = [""] * n
    token_ids: list[list[int]] = [[] for _ in range(n)]
    logprobs: list[list[TokenLogprob]] = [[] for _ in range(n)]
    reasons: list[str | None] = [None] * n
    while True:
        for event in events:
            if isinstance(event, Delta):
                i = event.index
                texts[i] += event.text
                token_ids[i] += event.token_ids
                logprobs[i] += event.logprobs
                reasons[i] = event.finish_reason or reasons[i]
            elif isinstance(event, PromptLogprobs):
                gen.prompt_logprobs = event.by_position
            elif isinstance(event, Failed):
                raise event.error
            elif isinstance(event, Outcome):
                body = _final_body(gen, texts, token_ids, logprobs, reasons, event)
                if not timing_object:
                    del body["kvscope"]
                    return web.json_response(body)
                return web.json_response(body, headers={HEADER: event.timing.header_value()})
        events = await stream.next_events()


def _final_body(
    gen: Generation,
    texts: list[str],
    token_ids: list[list[int]],
    logprobs: list[list[TokenLogprob]],
    reasons: list[str | None],
    outcome: Outcome,
) -> dict:
    req = gen.req
    if gen.chat:
        choices = [
            chat_choice(
                i,
                texts[i],
                None if req.logprobs is None else chat_logprobs(logprobs[i], gen.texts),
                reasons[i],
            )
            for i in range(len(texts))
        ]
        return chat_response(gen.rid, gen.created, gen.model, choices, outcome)
    choices = []
    for i in range(len(texts)):
        ids, lps = ([], []) if req.score_only else (token_ids[i], logprobs[i])
        text = (gen.prompt_text if req.echo else "") + ("" if req.score_only else texts[i])
        lp_obj = None
        if req.logprobs is not None:
            acc = completion_logprobs(gen.prompt_ids, gen.echo_logprobs(), gen.texts) if req.echo else None
            lp_obj = completion_logprobs(ids, lps, gen.texts, acc=acc).as_dict()
        choices.append(completion_choice(i, text, lp_obj, "length" if req.score_only else reasons[i]))
    return completion_response(gen.rid, gen.created, gen.model, choices, outcome, req.score_only)
