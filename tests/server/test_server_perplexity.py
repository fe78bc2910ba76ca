"""Perplexity through the API, the way evaluation harnesses score text: `echo` + `logprobs`
with `max_tokens: 0`, on the real SmolLM2-135M. An ordinary English paragraph must come out in
single digits; a wrong position, a dropped BOS or an off-by-one in the prompt logprobs shows up
as perplexity in the hundreds.

Each cheaper weight format is scored on the same token ids and compared with float32, token by
token. Tolerances, from what the formats round away (measured values are printed):
- bfloat16 (weights and activations, 8 mantissa bits): perplexity within 2% of float32, mean
  |logprob difference| per token under 0.06 nats;
- int8 (weight-only, one scale per output channel, bfloat16 at each projection): perplexity
  within 2%, mean |difference| under 0.1 nats;
- fp16 (float16 weights, float32 activations and sums, logits head included): perplexity
  within 0.5%, mean |difference| under 0.01 nats (measured: about 0.001).
Either bound is far below what a real fault does (a wrong scale or layout moves perplexity by
multiples, see test_model_llama's rotary-layout test).

The default format (no `--dtype` or `--quantization`: what users get, fp16 weights on an AVX2
CPU) is scored the same way, under the bounds of the format it resolves to here."""

from __future__ import annotations

import math

import openai
import pytest

from reference_engine.config import EngineConfig
from reference_engine.core.launch import CoreLaunch
from reference_engine.model.tokenizer_source import load_tokenizer
from reference_engine.model_dtype import resolve_model_dtype, resolve_quantization
from reference_engine.server.background import BackgroundServer, serve_in_background

pytestmark = pytest.mark.slow

PARAGRAPH = (
    "Water is a chemical compound made of hydrogen and oxygen. At room temperature it is a clear liquid "
    "with no taste or smell. Water covers about seventy percent of the surface of the Earth, and it is "
    "essential for all known forms of life. When water is heated to one hundred degrees Celsius, it boils "
    "and turns into steam. When it is cooled to zero degrees Celsius, it freezes and becomes ice."
)
# (dtype, quantization) -> (perplexity ratio bound, mean |logprob difference| bound, nats)
CHEAPER = {
    ("bfloat16", "none"): (0.02, 0.06),
    ("float32", "int8"): (0.02, 0.1),
    ("float32", "fp16"): (0.005, 0.01),
}


def start(dtype: str = "auto", quantization: str = "auto") -> BackgroundServer:
    # Prefix caching off: the second scoring of the same paragraph must be computed again.
    config = EngineConfig(
        model="smollm2-135m",
        num_blocks=256,
        max_model_len=1024,
        enable_prefix_caching=False,
        dtype=dtype,
        quantization=quantization,
    )
    return serve_in_background(CoreLaunch(config), "smollm2-135m")


def client_of(server: BackgroundServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)


def score(server: BackgroundServer, prompt) -> list[float]:
    result = client_of(server).completions.create(
        model="smollm2-135m", prompt=prompt, max_tokens=0, echo=True, logprobs=0
    )
    logprobs = result.choices[0].logprobs.token_logprobs
    assert logprobs[0] is None and len(logprobs) == result.usage.prompt_tokens
    return logprobs[1:]


def perplexity(logprobs: list[float]) -> float:
    return math.exp(-sum(logprobs) / len(logprobs))


@pytest.fixture(scope="module")
def server():
    with start("float32", "none") as srv:
        yield srv


@pytest.fixture(scope="module")
def paragraph_ids() -> list[int]:
    return load_tokenizer("smollm2-135m").encode(PARAGRAPH)


def test_perplexity_of_an_english_paragraph_is_single_digit(server):
    client = client_of(server)
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
    ppl = perplexity(scored)
    assert 1.0 < ppl < 10.0, ppl
    # The other idiom, max_tokens 1, scores the prompt identically and generates one token.
    other = client.completions.create(
        model="smollm2-135m", prompt=PARAGRAPH, max_tokens=1, echo=True, logprobs=0, temperature=0
    )
    assert other.usage.completion_tokens == 1
    assert other.choices[0].logprobs.token_logprobs[: len(logprobs)] == pytest.approx(logprobs[:1] + scored)
    print(f"SmolLM2 perplexity through the API: {ppl:.2f} over {len(scored)} tokens")


def test_chat_answers_in_english(server):
    reply = client_of(server).chat.completions.create(
        model="smollm2-135m",
        temperature=0,
        max_tokens=12,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
    )
    assert "Paris" in reply.choices[0].message.content


def compare(reference: list[float], dtype: str, quantization: str, paragraph_ids: list[int]):
    """(the server's weights, perplexity ratio to float32, mean |logprob difference|, diffs)."""
    with start(dtype, quantization) as cheaper:
        scored = score(cheaper, paragraph_ids)
        weights = cheaper.state.ready.weights
    assert len(scored) == len(reference)
    ratio = perplexity(scored) / perplexity(reference)
    diffs = [abs(a - b) for a, b in zip(scored, reference)]
    mean_diff = sum(diffs) / len(diffs)
    print(
        f"{weights}: perplexity {perplexity(scored):.3f} vs float32 {perplexity(reference):.3f} "
        f"(ratio {ratio:.4f}); |logprob difference| mean {mean_diff:.4f}, max {max(diffs):.4f} nats"
    )
    return weights, ratio, mean_diff, diffs


@pytest.mark.parametrize("dtype,quantization", list(CHEAPER))
def test_cheaper_weights_score_like_float32(server, paragraph_ids, dtype, quantization):
    _, ratio, mean_diff, diffs = compare(score(server, paragraph_ids), dtype, quantization, paragraph_ids)
    ratio_bound, mean_bound = CHEAPER[(dtype, quantization)]
    assert abs(ratio - 1) <= ratio_bound
    assert mean_diff <= mean_bound
    assert diffs != [0.0] * len(diffs)  # the cheaper path really ran


def test_the_default_format_scores_within_its_formats_bounds(server, paragraph_ids):
    quantization = resolve_quantization("auto") or "none"
    resolved = (resolve_model_dtype("auto"), quantization)
    weights, ratio, mean_diff, diffs = compare(score(server, paragraph_ids), "auto", "auto", paragraph_ids)
    if quantization == "fp16":
        assert weights.startswith("float16 projections")
    if resolved == ("float32", "none"):
        assert diffs == [0.0] * len(diffs)  # the default is the exact path here
    else:
        ratio_bound, mean_bound = CHEAPER[resolved]
        assert abs(ratio - 1) <= ratio_bound and mean_diff <= mean_bound
