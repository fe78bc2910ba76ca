"""A stream's plain chunks (text only: no logprobs, not a choice's last) are rendered from
templates cut around a probe text; every chunk must be byte for byte what rendering its dict
gives, for every request shape, texts JSON must escape included."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from reference_engine.engine import TokenLogprob
from reference_engine.server.events import Delta, Outcome, RequestStream
from reference_engine.server.generation import Generation
from reference_engine.server.protocol import parse_chat, parse_completion
from reference_engine.server.responses import TokenTexts
from reference_engine.server.state import STATE
from reference_engine.server.streaming import _SseWriter
from reference_engine.server.timing import RequestTiming

TEXTS = ["Hello", ' "quoted"', "\n\tnew line", "\\ back", "é 日本 🙂", "\x00\x1f ctrl", "", "</script>"]


def writer(body: dict, chat: bool, templates: bool, timing_object: bool = False) -> _SseWriter:
    req = (parse_chat if chat else parse_completion)(body)
    gen = Generation(
        "cmpl-1", 1_700_000_000, "smol", req, [1, 2, 3], "the prompt", TokenTexts(lambda ids: f"<{ids}>")
    )
    state = SimpleNamespace(
        metrics=None,
        config=SimpleNamespace(timing_object=timing_object),
        engine=SimpleNamespace(processor=SimpleNamespace(write_delays=[])),
    )
    request = SimpleNamespace(app={STATE: state}, transport=None)
    out = _SseWriter(request, SimpleNamespace(headers={}), gen, RequestStream("r"))
    if not templates:
        out.builder.templates = None
    return out


def batches(n: int) -> list[list]:
    """Per step one delta of every choice; the last step finishes them and ends the request."""
    lp = [TokenLogprob(7, -0.5, [(7, -0.5)])]
    steps = [[Delta(i, [7], text, lp, None) for i in range(n)] for text in TEXTS]
    steps.append([Delta(i, [7], "end", lp, "length") for i in range(n)] + [Outcome(3, n * 9, 0, None)])
    return steps


SHAPES = {
    "completion": (False, {"prompt": "hi"}),
    "completion usage": (False, {"prompt": "hi", "stream_options": {"include_usage": True}}),
    "completion n=2": (False, {"prompt": "hi", "n": 2}),
    "completion echo": (False, {"prompt": "hi", "echo": True}),
    "completion logprobs": (False, {"prompt": "hi", "logprobs": 1}),
    "completion score only": (False, {"prompt": "hi", "echo": True, "max_tokens": 0, "logprobs": 0}),
    "chat": (True, {"messages": [{"role": "user", "content": "hi"}]}),
    "chat usage n=2": (
        True,
        {"messages": [{"role": "user", "content": "hi"}], "n": 2, "stream_options": {"include_usage": True}},
    ),
    "chat logprobs": (True, {"messages": [{"role": "user", "content": "hi"}], "logprobs": True}),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_template_chunks_are_the_dict_chunks(shape):
    chat, extra = SHAPES[shape]
    body = {"model": "smol", "stream": True, "max_tokens": 9, **extra}
    fast, slow = writer(body, chat, templates=True), writer(body, chat, templates=False)
    n = fast.gen.req.params.n
    for batch in batches(n):
        assert fast.render(batch) == slow.render(batch)
    templates = fast.builder.templates
    if "logprobs" in shape or "score" in shape:
        assert templates is None or not any(t for pair in templates for t in pair)
    else:  # every choice's later chunks; its first too, but for echo's
        assert all(later and bool(first) != ("echo" in shape) for first, later in templates)


@pytest.mark.parametrize("timing_object", [True, False], ids=["kvscope", "no-kvscope"])
@pytest.mark.parametrize("shape", SHAPES)
def test_an_outcome_in_a_batch_of_its_own_renders_as_in_the_last_deltas_batch(shape, timing_object):
    # The output processor sends an outcome after every stream's tokens of the step; the
    # response must read as if it had come with the last deltas (kvscope on the last choice's
    # last chunk without include_usage, on the usage chunk with it).
    chat, extra = SHAPES[shape]
    body = {"model": "smol", "stream": True, "max_tokens": 9, **extra}
    apart, together = (writer(body, chat, True, timing_object) for _ in range(2))
    *steps, last = batches(apart.gen.req.params.n)
    timing = RequestTiming(0.1, 0.2, 0.3, 0.4, 0.7, 0, 0, 1_700_000_000.0)
    last[-1] = Outcome(3, 9, 0, timing)
    for batch in steps:
        assert apart.render(batch) == together.render(batch)
    deltas = apart.render(last[:-1])
    assert apart.carried_tokens
    ending = apart.render(last[-1:])
    assert deltas + ending == together.render(last)
    assert apart.done and ending.endswith(b"data: [DONE]\n\n")
    assert (b'"kvscope"' in ending) == timing_object


class _Transport:
    def __init__(self):
        self.written: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data: bytes) -> None:
        self.written.append(data)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_text_shortcut_writes_what_the_delta_would(shape):
    # One choice, past its first chunk, no logprobs: the output processor hands the writer the
    # text alone (`RequestStream.put_text`); the bytes must be those of the Delta's chunk.
    chat, extra = SHAPES[shape]
    body = {"model": "smol", "stream": True, "max_tokens": 9, **extra}
    short, full = writer(body, chat, True), writer(body, chat, True)
    for w in (short, full):
        w.transport = _Transport()
    n = short.gen.req.params.n
    offered = n == 1 and "logprobs" not in shape and "score" not in shape
    assert short.stream.text_sink is None  # the first chunk is the Delta's
    first = [Delta(0, [7], "Hi", [], None)]
    assert short.write_now(1.0, first) and full.write_now(1.0, first)
    assert (short.stream.text_sink is not None) == offered
    if not offered:
        return
    for text in TEXTS:
        assert short.write_text(1.0, text)
        assert full.write_now(1.0, [Delta(0, [7], text, [], None)])
    assert short.transport.written == full.transport.written
