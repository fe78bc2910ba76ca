"""Every request field of both generation endpoints, given values the engine cannot take.

Property tests: a valid body with one field (top-level or nested) replaced by a hostile value
(numbers beyond float range, NaN/Infinity/1e999, lone UTF-16 surrogates in values and in
field names, control characters, deep nesting, wrong types, out-of-range integers). Whatever
the value, the answer is never a 5xx, every refusal is OpenAI's error shape naming the field,
the classes no field can take are always refused, and after each request the engine is idle
with every KV block free.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_engine.server.json_values import MAX_DEPTH
from tests.support.tiny_server import MODEL, assert_no_leaked_blocks, post, start

COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
BASE = {
    COMPLETIONS: {"model": MODEL, "prompt": "hi", "max_tokens": 2},
    CHAT: {"model": MODEL, "messages": [{"role": "user", "content": "hi", "name": "u"}], "max_tokens": 2},
}
SAMPLING = [
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "n",
    "stop",
    ("stop", 0),
    "ignore_eos",
    "min_tokens",
    "stream",
    "stream_options",
    ("stream_options", "include_usage"),
    "best_of",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    ("logit_bias", "42"),
    "response_format",
    ("response_format", "type"),
    "user",  # not read by this server: only the rules for every value apply
    "metadata",
]
FIELDS = {
    COMPLETIONS: ["model", "prompt", ("prompt", 0), "suffix", "logprobs", "echo", *SAMPLING],
    CHAT: [
        "model",
        "messages",
        ("messages", 0),
        ("messages", 1),
        ("messages", 0, "role"),
        ("messages", 0, "content"),
        ("messages", 0, "content", 0),
        ("messages", 0, "content", 0, "type"),
        ("messages", 0, "content", 0, "text"),
        ("messages", 0, "name"),
        "max_completion_tokens",
        "logprobs",
        "top_logprobs",
        "tools",
        "functions",
        *SAMPLING,
    ],
}
# What a nested path needs around it to be reached (a list prompt, a streamed request, ...).
SCAFFOLD = {
    "prompt": [1, 2, 3],
    "stop": ["zz"],
    "stream_options": {"include_usage": True},
    "logit_bias": {},
    "response_format": {"type": "text"},
    "content": [{"type": "text", "text": "hi"}],
}
IDENTIFIERS = {"model", ("messages", 0, "name")}  # no control characters allowed
NONFINITE = ["NaN", "Infinity", "-Infinity", "1e999", "-1e400"]
_MARK = re.compile(r'"@nonfinite(\d)@"')


def _path(field) -> tuple:
    return field if isinstance(field, tuple) else (field,)


def body_with(endpoint: str, field, value) -> dict:
    body = json.loads(json.dumps(BASE[endpoint]))
    path = _path(field)
    if path[0] == "stream_options" or path[0] == "stream":
        body["stream"] = True
    node = body
    for key in path[:-1]:
        if isinstance(node, dict) and not isinstance(node.get(key), (dict, list)):
            node[key] = json.loads(json.dumps(SCAFFOLD[key]))
        node = node[key]
    last = path[-1]
    if isinstance(node, list) and last == len(node):
        node.append(value)
    else:
        node[last] = value
    return body


def encode(body: dict) -> bytes:
    """JSON with ASCII escapes (so lone surrogates travel as `\\udXXX`) and the non-finite
    markers written as bare NaN / Infinity / 1e999."""
    text = json.dumps(body, ensure_ascii=True)
    return _MARK.sub(lambda m: NONFINITE[int(m.group(1))], text).encode()


def _nest(depth: int, leaf):
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"x": value}
    return value


text = st.text(max_size=12)
lone_surrogate = st.builds(
    lambda head, s, tail: head + s + tail,
    text,
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    text,
)
control = st.builds(
    lambda head, c, tail: head + c + tail,
    text,
    st.sampled_from([chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]]),
    text,
)
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([5e-324, 1e-300, -0.0, 1e308]),
    text,
    st.text(min_size=200, max_size=2000),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=8,
)
# (class, value) pairs; the first four classes are refused in every field.
HOSTILE = st.one_of(
    st.tuples(st.just("huge_int"), st.integers(10**309, 10**400) | st.integers(-(10**400), -(10**309))),
    st.tuples(st.just("non_finite"), st.sampled_from([f"@nonfinite{i}@" for i in range(len(NONFINITE))])),
    st.tuples(st.just("surrogate"), lone_surrogate | st.builds(lambda k: {k: 1}, lone_surrogate)),
    st.tuples(st.just("deep"), st.builds(_nest, st.integers(MAX_DEPTH, 400), json_leaf)),
    st.tuples(st.just("control"), control),
    st.tuples(st.just("any"), json_value),
)
ALWAYS_REFUSED = {"huge_int", "non_finite", "surrogate", "deep"}


@pytest.fixture(scope="module")
def server():
    # A short context bounds every accepted request to a few steps.
    s = start(num_blocks=64, max_model_len=48, max_num_seqs=8)
    yield s
    s.stop()


def check_answer(server, endpoint: str, field, kind: str, value) -> None:
    body = body_with(endpoint, field, value)
    status, payload = post(server, endpoint, encode(body))
    top = _path(field)[0]
    assert status < 500, (field, kind, payload[:300])
    if status >= 400:
        error = json.loads(payload)["error"]
        assert set(error) == {"message", "type", "param", "code"}, error
        assert isinstance(error["message"], str) and error["type"] == "invalid_request_error"
        if kind in ALWAYS_REFUSED or (kind == "control" and field in IDENTIFIERS):
            assert error["param"] == top, (field, kind, error)
        else:
            assert error["param"] in body, (field, kind, error)  # a field the request has
    else:
        assert kind not in ALWAYS_REFUSED, (field, kind, status)
        assert not (kind == "control" and field in IDENTIFIERS), (field, status)
        if payload.startswith(b"data: "):
            assert payload.rstrip().endswith(b"data: [DONE]")
        else:
            assert "usage" in json.loads(payload)
    assert_no_leaked_blocks(server)


EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "250"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@PROPERTY
@given(field=st.sampled_from(FIELDS[COMPLETIONS]), hostile=HOSTILE)
def test_every_completions_field_refuses_what_the_engine_cannot_take(server, field, hostile):
    check_answer(server, COMPLETIONS, field, *hostile)


@PROPERTY
@given(field=st.sampled_from(FIELDS[CHAT]), hostile=HOSTILE)
def test_every_chat_field_refuses_what_the_engine_cannot_take(server, field, hostile):
    check_answer(server, CHAT, field, *hostile)


@pytest.mark.parametrize("endpoint", [COMPLETIONS, CHAT])
@pytest.mark.parametrize(
    "kind,value", [("huge_int", 10**400), ("non_finite", "@nonfinite3@"), ("surrogate", "\udcff")]
)
def test_each_field_names_itself_for_each_refused_class(server, endpoint, kind, value):
    """Exhaustive over fields (the property tests sample them): the issue's cases, a
    400-digit number, 1e999 and "\\udcff", in every field."""
    for field in FIELDS[endpoint]:
        body = body_with(endpoint, field, value)
        status, payload = post(server, endpoint, encode(body))
        assert status == 400, (field, payload[:200])
        assert json.loads(payload)["error"]["param"] == _path(field)[0], (field, payload[:200])


@pytest.mark.parametrize("endpoint", [COMPLETIONS, CHAT])
def test_nesting_beyond_the_json_decoder_is_a_400(server, endpoint):
    body = encode(BASE[endpoint])[:-1] + b', "user": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    status, payload = post(server, endpoint, body)
    assert status == 400 and "nested" in json.loads(payload)["error"]["message"]


def test_the_engine_serves_after_the_properties(server):
    status, payload = post(server, COMPLETIONS, json.dumps(BASE[COMPLETIONS]).encode())
    assert status == 200 and json.loads(payload)["usage"]["completion_tokens"] == 2
    assert_no_leaked_blocks(server)
