"""Perplexity through the API, the way evaluation harnesses score text: `echo` + `logprobs`
with `max_tokens: 0`, on the real SmolLM2-135M. An ordinary English paragraph must come out in
single digits; a wrong position, a dropped BOS or an off-by-one in the prompt logprobs shows up
as perplexity in the hundreds."""

from __future__ import annotations

import math

import openai
import pytest

from reference_engine.config import EngineConfig
from reference_engine.engine_factory import build_engine
from reference_engine.server.app import create_app
from reference_engine.server.background import BackgroundServer
from reference_engine.server.state import ServerConfig

pytestmark = pytest.mark.slow

PARAGRAPH = (
    "Water is a chemical compound made of hydrogen and oxygen. At room temperature it is a clear liquid "
    "with no taste or smell. Water covers about seventy percent of the surface of the Earth, and it is "
    "essential for all known forms of life. When water is heated to one hundred degrees Celsius, it boils "
    "and turns into steam. When it is cooled to zero degrees Celsius, it freezes and becomes ice."
)


@pytest.fixture(scope="module")
def server():
    # Prefix caching off: the second scoring of the same paragraph must be computed again, not
    # hit in the cache (a cache hit currently leaves those prompt positions unscored; see
    # test_server_openai's xfail).
    built = build_engine(
        EngineConfig(model="smollm2-135m", num_blocks=256, max_model_len=1024, enable_prefix_caching=False)
    )
    info = {
        "block_size": "16",
        "num_gpu_blocks": "256",
        "cache_dtype": "auto",
        "enable_prefix_caching": "False",
        "allocator": "paged",
    }
    app = create_app(built.engine, built.tokenizer, ServerConfig("smollm2-135m", built.loaded.source), info)
    with BackgroundServer(app) as srv:
        yield srv


def test_perplexity_of_an_english_paragraph_is_single_digit(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    result = client.completions.create(
        model="smollm2-135m", prompt=PARAGRAPH, max_tokens=0, echo=True, logprobs=0
    )
    choice = result.choices[0]
    logprobs = choice.logprobs.token_logprobs
    assert choice.text == PARAGRAPH and result.usage.completion_tokens == 0
    assert len(logprobs) == result.usage.prompt_tokens > 50
    assert logprobs[0] is None  # nothing precedes the first token
    scored = logprobs[1:]
    assert all(lp is not None and lp <= 0 for lp in scored)
    perplexity = math.exp(-sum(scored) / len(scored))
    assert 1.0 < perplexity < 10.0, perplexity
    # The other idiom, max_tokens 1, scores the prompt identically and generates one token.
    other = client.completions.create(
        model="smollm2-135m", prompt=PARAGRAPH, max_tokens=1, echo=True, logprobs=0, temperature=0
    )
    assert other.usage.completion_tokens == 1
    assert other.choices[0].logprobs.token_logprobs[: len(logprobs)] == pytest.approx(logprobs[:1] + scored)
    print(f"SmolLM2 perplexity through the API: {perplexity:.2f} over {len(scored)} tokens")


def test_chat_answers_in_english(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    reply = client.chat.completions.create(
        model="smollm2-135m",
        temperature=0,
        max_tokens=12,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
    )
    assert "Paris" in reply.choices[0].message.content
