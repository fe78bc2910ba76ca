"""A client that disconnects frees its KV blocks at once, and no request body, however wrong
(random JSON, wrong types, huge numbers, unicode, bytes that are not JSON), gets a 5xx or
takes the server down."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import time

import aiohttp
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from reference_engine.core.messages import AbortRequests
from reference_engine.server.background import BackgroundServer
from tests.support.tiny_server import MODEL, all_blocks_free, post, start, wait_idle


def metric(server: BackgroundServer, name: str, **labels: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and labels.items() <= s.labels.items():
                return s.value
    raise KeyError(name)


# -- disconnects ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def roomy():
    server = start(num_blocks=256, max_model_len=1024, max_num_seqs=1)
    yield server
    server.stop()


async def _stream_then_leave(url: str, body: dict, events_before_leaving: int) -> int:
    """Read a few SSE events, then drop the connection without reading the rest."""
    seen = 0
    async with aiohttp.ClientSession() as session:
        response = await session.post(url + "/v1/completions", json=body)
        assert response.status == 200
        async for line in response.content:
            if line.startswith(b"data: "):
                seen += 1
                if seen >= events_before_leaving:
                    break
        response.close()  # closes the connection mid-stream
    return seen


def test_disconnect_mid_stream_frees_blocks_at_once(roomy, monkeypatch):
    """The abort reaches the core process, which frees the blocks before its next step. The
    core's records show it exactly, however late the server reads them: the record that
    reports the abort counts no more steps than the record before it, and every block but
    the null block is free in it (the core loop's own test, tests/engine/test_core_loop.py,
    pins the same with a scripted transport)."""
    engine = roomy.state.engine
    aborts_sent: list[AbortRequests] = []
    send = engine.client.send
    records = []
    process = engine.processor.process

    def watch(command):
        if isinstance(command, AbortRequests):
            aborts_sent.append(command)
        send(command)

    def record(outputs):
        records.append(outputs)
        return process(outputs)

    monkeypatch.setattr(engine.client, "send", watch)
    monkeypatch.setattr(engine.processor, "process", record)
    body = {"model": MODEL, "prompt": "x" * 100, "max_tokens": 800, "stream": True, "ignore_eos": True}
    aborted_before = metric(roomy, "vllm:request_success_total", finished_reason="abort")
    assert asyncio.run(_stream_then_leave(roomy.url, body, 3)) == 3
    deadline = time.monotonic() + 10  # far sooner than 800 tokens would take
    while not all_blocks_free(roomy) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert all_blocks_free(roomy) and len(aborts_sent) == 1
    (request_id,) = aborts_sent[0].request_ids
    (at,) = [
        i
        for i, r in enumerate(records)
        if any(o.request_id == request_id and o.finish_reason == "abort" for o in r.outputs)
    ]
    before, reported = records[at - 1].stats, records[at].stats
    assert reported.steps == before.steps, (before.steps, reported.steps)
    assert reported.num_free_blocks == roomy.state.ready.num_blocks - 1 and reported.num_running == 0
    wait_idle(roomy, timeout=10)
    assert metric(roomy, "vllm:kv_cache_usage_perc") == 0.0
    assert metric(roomy, "vllm:num_requests_running") == 0.0
    assert metric(roomy, "vllm:request_success_total", finished_reason="abort") == aborted_before + 1
    assert engine.stats.generation_tokens < 800


async def _two_requests_second_leaves_while_queued(url: str) -> None:
    """max_num_seqs=1: the second request waits in the queue; its client gives up there."""
    long = {
        "model": MODEL,
        "prompt": "first",
        "max_tokens": 1000,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    queued = {"model": MODEL, "prompt": "second", "max_tokens": 150, "ignore_eos": True}
    async with aiohttp.ClientSession() as session:
        first = await session.post(url + "/v1/completions", json=long)
        assert first.status == 200
        await first.content.readline()  # its first token: it holds the only running slot for ~1,000 steps
        with pytest.raises(asyncio.TimeoutError):
            await session.post(url + "/v1/completions", json=queued, timeout=aiohttp.ClientTimeout(total=0.3))
        events = [line[6:].strip() async for line in first.content if line.startswith(b"data: ")]
        assert events[-1] == b"[DONE]"
        assert json.loads(events[-2])["usage"]["completion_tokens"] == 1000


def test_non_streaming_client_that_gives_up_while_queued_is_aborted(roomy):
    engine = roomy.state.engine
    tokens_before = engine.stats.generation_tokens
    asyncio.run(_two_requests_second_leaves_while_queued(roomy.url))
    wait_idle(roomy)
    assert engine.stats.generation_tokens - tokens_before == 1000  # the second never ran
    assert all_blocks_free(roomy)


# -- fuzzing --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small():
    # A short context bounds every accepted request to a few dozen steps.
    server = start(num_blocks=128, max_model_len=48, max_num_seqs=32)
    yield server
    server.stop()


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False),
    st.text(max_size=40),
    st.sampled_from(["", "\u0000", "\ud7ff\ufffd", "𝔘𝔫𝔦", MODEL]),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
PARAMS = [
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "seed",
    "n",
    "stop",
    "ignore_eos",
    "min_tokens",
    "logprobs",
    "top_logprobs",
    "echo",
    "stream",
    "stream_options",
    "best_of",
    "suffix",
    "presence_penalty",
    "logit_bias",
    "response_format",
]
VALID = {
    "/v1/completions": {"model": MODEL, "prompt": "hi", "max_tokens": 4},
    "/v1/chat/completions": {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
    },
}


PLAUSIBLE = {
    "prompt": st.one_of(st.text(max_size=30), st.lists(st.integers(-2, 300), max_size=20)),
    "messages": st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "user", "assistant", "bot"]), "content": st.text(max_size=20)}
        ),
        max_size=3,
    ),
    "max_tokens": st.integers(0, 60),
    "max_completion_tokens": st.integers(0, 60),
    "temperature": st.floats(0, 3),
    "top_p": st.floats(0, 1.2),
    "seed": st.integers(-(2**64), 2**64),
    "n": st.integers(0, 4),
    "stop": st.one_of(st.text(max_size=3), st.lists(st.text(max_size=3), max_size=3)),
    "ignore_eos": st.booleans(),
    "min_tokens": st.integers(0, 70),
    "logprobs": st.one_of(st.booleans(), st.integers(-1, 25)),
    "top_logprobs": st.integers(-1, 25),
    "echo": st.booleans(),
    "stream": st.booleans(),
    "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
}


@st.composite
def bodies(draw) -> bytes:
    kind = draw(st.sampled_from(["plausible", "plausible", "mutated", "random", "bytes", "edge"]))
    path = draw(st.sampled_from(sorted(VALID)))
    if kind == "plausible":
        body = dict(VALID[path])
        for key in draw(st.lists(st.sampled_from(sorted(PLAUSIBLE)), max_size=6)):
            body[key] = draw(PLAUSIBLE[key])
        return path, json.dumps(body).encode()
    if kind == "bytes":
        return path, draw(st.binary(max_size=64))
    if kind == "random":
        return path, json.dumps(draw(json_value)).encode()
    if kind == "edge":
        return path, draw(
            st.sampled_from(
                [
                    b"",
                    b"{",
                    b"[]",
                    b"null",
                    b'{"n": NaN}',
                    b'{"max_tokens": 1e999}',
                    b'{"prompt": "' + b"9" * 5000 + b'"}',
                    b"[" * 5000 + b"]" * 5000,
                    b'{"max_tokens": ' + b"9" * 5000 + b"}",
                    '{"prompt": "\udcff"}'.encode("utf-8", "surrogatepass"),
                ]
            )
        )
    body = dict(VALID[path])
    for key in draw(st.lists(st.sampled_from(PARAMS), max_size=4)):
        body[key] = draw(json_value)
    return path, json.dumps(body).encode()


@settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=bodies())
def test_no_request_body_gets_a_5xx(small, request):
    path, body = request
    status, payload = post(small, path, body)
    event(f"status {status}")
    assert status < 500, payload[:300]
    if status >= 400:
        error = json.loads(payload)["error"]
        assert isinstance(error["message"], str) and error["type"]
    elif payload.startswith(b"data: "):
        assert payload.rstrip().endswith(b"data: [DONE]")
    else:
        assert "usage" in json.loads(payload)


def test_server_is_healthy_and_idle_after_fuzzing(small):
    wait_idle(small)
    conn = http.client.HTTPConnection("127.0.0.1", small.port, timeout=30)
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200
    assert all_blocks_free(small)


@pytest.mark.parametrize(
    "field,value",
    [
        ("temperature", 5e-324),
        ("temperature", 1e-30),
        ("temperature", 0.009),
        ("top_p", 5e-324),
        ("top_p", 1e-300),
        ("top_p", 1e-40),
    ],
)
def test_tiny_temperature_or_top_p_samples_instead_of_crashing_the_engine(small, field, value):
    """A temperature of 1e-30 overflows logits / temperature to inf, and a top_p below float32's
    range masks every token: NaN probabilities, a failed step, the whole engine down. The
    server raises both to a floor (vLLM's 0.01 for temperature; 1e-6 for top_p)."""
    for _ in range(2):
        body = {"model": MODEL, "prompt": "abc", "max_tokens": 3, field: value}
        status, payload = post(small, "/v1/completions", json.dumps(body).encode())
        assert status == 200, payload
