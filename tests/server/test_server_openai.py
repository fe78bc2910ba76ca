"""The official `openai` client against the reference server on the real tiny-random model,
its engine core in its own process: completions and chat, streaming and not, n=2, stop,
logprobs, echo, usage, and the `kvscope` timing object."""

from __future__ import annotations

import json

import openai
import pytest

from reference_engine.config import EngineConfig
from reference_engine.core.launch import CoreLaunch
from reference_engine.server.background import serve_in_background

MODEL = "tiny"
TIMING_KEYS = {
    "queue_time_s",
    "prefill_time_s",
    "ttft_s",
    "decode_time_s",
    "e2e_s",
    "num_preemptions",
    "cached_prompt_tokens",
    "arrival_unix",
}
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def server():
    launch = CoreLaunch(EngineConfig(model="tiny-random", num_blocks=512, max_model_len=512))
    with serve_in_background(launch, MODEL) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def check_timing(timing: dict) -> None:
    assert set(timing) == TIMING_KEYS
    assert timing["queue_time_s"] + timing["prefill_time_s"] == pytest.approx(timing["ttft_s"], abs=2e-6)
    assert timing["ttft_s"] + timing["decode_time_s"] == pytest.approx(timing["e2e_s"], abs=2e-6)
    assert timing["e2e_s"] > 0 and timing["arrival_unix"] > 1.7e9


def check_usage(usage, completion_tokens: int | None = None) -> None:
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens >= 0
    if completion_tokens is not None:
        assert usage.completion_tokens == completion_tokens


def test_models_lists_the_served_name(client):
    (model,) = client.models.list().data
    assert model.id == MODEL and model.model_extra["max_model_len"] == 512


def test_completion_non_streaming_carries_usage_and_timing(client):
    raw = client.completions.with_raw_response.create(
        model=MODEL, prompt="Hello, world", max_tokens=12, temperature=0, extra_body={"ignore_eos": True}
    )
    completion = raw.parse()
    (choice,) = completion.choices
    assert choice.finish_reason == "length" and choice.index == 0
    check_usage(completion.usage, 12)
    assert completion.usage.prompt_tokens == len(b"Hello, world")  # the byte tokenizer
    timing = completion.model_extra["kvscope"]
    check_timing(timing)
    assert json.loads(raw.headers["x-kvscope-timing"]) == timing


def test_completion_streaming_matches_non_streaming(client):
    kwargs = dict(
        model=MODEL, prompt="Stream me", max_tokens=10, temperature=0, extra_body={"ignore_eos": True}
    )
    whole = client.completions.create(**kwargs)
    chunks = list(client.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    check_usage(last.usage, 10)
    check_timing(last.model_extra["kvscope"])
    assert all(c.usage is None for c in chunks[:-1])


def test_stream_without_usage_puts_timing_on_the_last_chunk(client):
    chunks = list(
        client.completions.create(
            model=MODEL, prompt="abc", max_tokens=3, stream=True, extra_body={"ignore_eos": True}
        )
    )
    assert chunks[-1].choices[0].finish_reason == "length"
    check_timing(chunks[-1].model_extra["kvscope"])
    assert all("kvscope" not in (c.model_extra or {}) for c in chunks[:-1])


def test_chat_streaming_matches_non_streaming(client):
    kwargs = dict(
        model=MODEL, messages=CHAT, max_completion_tokens=8, temperature=0, extra_body={"ignore_eos": True}
    )
    whole = client.chat.completions.create(**kwargs)
    assert whole.choices[0].message.role == "assistant"
    check_usage(whole.usage, 8)
    check_timing(whole.model_extra["kvscope"])
    chunks = list(
        client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert (
        chunks[-1].usage.completion_tokens == 8
        and chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    )


def test_n2_gives_two_distinct_choices_streaming_and_not(client):
    kwargs = dict(
        model=MODEL,
        prompt="Two roads",
        max_tokens=16,
        temperature=1.0,
        seed=7,
        n=2,
        extra_body={"ignore_eos": True},
    )
    whole = client.completions.create(**kwargs)
    assert sorted(c.index for c in whole.choices) == [0, 1]
    assert whole.choices[0].text != whole.choices[1].text
    check_usage(whole.usage, 32)
    chunks = list(client.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    texts = ["", ""]
    for c in chunks:
        for choice in c.choices:
            texts[choice.index] += choice.text
    assert texts == [whole.choices[0].text, whole.choices[1].text]  # seeded: same tokens either way
    assert chunks[-1].usage.completion_tokens == 32


def test_chat_n2_streaming(client):
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=CHAT,
            max_tokens=5,
            n=2,
            seed=1,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    reasons = {
        c.choices[0].index: c.choices[0].finish_reason
        for c in chunks
        if c.choices and c.choices[0].finish_reason
    }
    assert reasons == {0: "length", 1: "length"}


def test_stop_string_truncates_and_finishes_with_stop(client):
    base = (
        client.completions.create(
            model=MODEL, prompt="Find a stop", max_tokens=24, temperature=0, extra_body={"ignore_eos": True}
        )
        .choices[0]
        .text
    )
    stop = next(base[i : i + 2] for i in range(4, len(base) - 1) if "\ufffd" not in base[i : i + 2])
    cut = base.index(stop)
    for stream in (False, True):
        result = client.completions.create(
            model=MODEL,
            prompt="Find a stop",
            max_tokens=24,
            temperature=0,
            stop=[stop, "never-there"],
            stream=stream,
            extra_body={"ignore_eos": True},
        )
        if stream:
            chunks = list(result)
            text = "".join(c.choices[0].text for c in chunks)
            reason = chunks[-1].choices[0].finish_reason
        else:
            text, reason = result.choices[0].text, result.choices[0].finish_reason
        assert text == base[:cut] and reason == "stop"


def test_completion_logprobs(client):
    result = client.completions.create(
        model=MODEL, prompt="log", max_tokens=6, temperature=0, logprobs=3, extra_body={"ignore_eos": True}
    )
    lp = result.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert all(v <= 0 for v in lp.token_logprobs)
    # Up to 3 alternatives plus the chosen token; byte tokens that decode to the same text
    # (U+FFFD for partial characters) share one key in this legacy dict format.
    assert all(1 <= len(top) <= 4 for top in lp.top_logprobs)
    # Greedy: the chosen token is the most likely one.
    assert all(max(top.values()) == pytest.approx(v) for top, v in zip(lp.top_logprobs, lp.token_logprobs))


def test_chat_logprobs_streaming_and_not(client):
    kwargs = dict(
        model=MODEL,
        messages=CHAT,
        max_tokens=4,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        extra_body={"ignore_eos": True},
    )
    content = client.chat.completions.create(**kwargs).choices[0].logprobs.content
    assert len(content) == 4
    assert all(len(e.top_logprobs) == 2 and e.logprob <= 0 and isinstance(e.bytes, list) for e in content)
    streamed = [
        e
        for c in client.chat.completions.create(**kwargs, stream=True)
        for e in c.choices[0].logprobs.content
    ]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content])


def test_echo_scores_the_prompt(client):
    for stream in (False, True):
        prompt = f"{'Streamed' if stream else 'Whole'}: score every token of this prompt."
        result = client.completions.create(
            model=MODEL,
            prompt=prompt,
            max_tokens=0,
            echo=True,
            logprobs=1,
            stream=stream,
            stream_options={"include_usage": True} if stream else None,
        )
        if stream:
            chunks = list(result)
            (choice,) = chunks[0].choices
            usage = chunks[-1].usage
        else:
            choice, usage = result.choices[0], result.usage
        assert choice.text == prompt
        lp = choice.logprobs.token_logprobs
        assert len(lp) == usage.prompt_tokens == len(prompt.encode())
        assert lp[0] is None and all(v is not None and v <= 0 for v in lp[1:])
        assert choice.logprobs.top_logprobs[0] is None
        assert usage.completion_tokens == 0


def test_echo_with_generation_returns_prompt_then_completion(client):
    result = client.completions.create(
        model=MODEL, prompt="Echo:", max_tokens=3, echo=True, temperature=0, extra_body={"ignore_eos": True}
    )
    plain = client.completions.create(
        model=MODEL, prompt="Echo:", max_tokens=3, temperature=0, extra_body={"ignore_eos": True}
    )
    assert result.choices[0].text == "Echo:" + plain.choices[0].text


def test_prompt_as_token_ids_and_seeded_sampling_repeats(client):
    ids = list(b"token ids")
    a = client.completions.create(
        model=MODEL, prompt=ids, max_tokens=8, temperature=0.8, seed=123, extra_body={"ignore_eos": True}
    )
    b = client.completions.create(
        model=MODEL,
        prompt="token ids",
        max_tokens=8,
        temperature=0.8,
        seed=123,
        extra_body={"ignore_eos": True},
    )
    assert a.choices[0].text == b.choices[0].text and a.usage.prompt_tokens == len(ids)


def test_shared_prefix_reports_cached_tokens(client):
    prefix = "A long shared system preamble that fills several KV blocks of sixteen tokens each. "
    first = client.completions.create(model=MODEL, prompt=prefix + "one", max_tokens=2)
    second = client.completions.create(model=MODEL, prompt=prefix + "two", max_tokens=2)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert second.usage.prompt_tokens_details.cached_tokens == len(prefix.encode()) // 16 * 16
    assert (
        second.model_extra["kvscope"]["cached_prompt_tokens"]
        == second.usage.prompt_tokens_details.cached_tokens
    )


def test_echo_scoring_is_complete_when_the_prompt_is_cached(client):
    prompt = "The same prompt, scored twice, must get the same logprobs both times."
    first, second = (
        client.completions.create(model=MODEL, prompt=prompt, max_tokens=0, echo=True, logprobs=0)
        for _ in range(2)
    )
    assert second.choices[0].logprobs.token_logprobs == first.choices[0].logprobs.token_logprobs
