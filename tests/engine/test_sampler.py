"""Sampler: greedy, temperature, top-p, seeding, n>1, banned tokens, logprobs."""

from __future__ import annotations

import math

import pytest
import torch

from reference_engine.sampler import Sampler, make_generator
from reference_engine.sampling_params import SamplingParams

V = 300


@pytest.fixture
def logits() -> torch.Tensor:
    return torch.randn(V, generator=torch.Generator().manual_seed(0)) * 2


def draw(logits, params, seed, index=0, steps=20) -> list[int]:
    sampler, gen = Sampler(), make_generator(seed, index)
    return [sampler.sample(logits, params, gen)[0] for _ in range(steps)]


def test_same_seed_same_tokens(logits):
    params = SamplingParams(temperature=1.0, seed=1234)
    first = draw(logits, params, 1234)
    assert first == draw(logits, params, 1234)
    assert len(set(first)) > 1  # it really samples
    assert first != draw(logits, params, 1235)


def test_choices_of_one_request_get_different_streams(logits):
    params = SamplingParams(temperature=1.0, seed=7, n=2)
    assert draw(logits, params, 7, index=0) != draw(logits, params, 7, index=1)


def test_unseeded_generators_differ(logits):
    params = SamplingParams(temperature=1.0)
    assert draw(logits, params, None) != draw(logits, params, None)


def test_temperature_zero_is_argmax(logits):
    assert Sampler().sample(logits, SamplingParams(temperature=0.0)) == [int(logits.argmax())]


def test_tiny_top_p_is_argmax(logits):
    tokens = draw(logits, SamplingParams(temperature=1.5, top_p=1e-6), seed=3, steps=50)
    assert set(tokens) == {int(logits.argmax())}


def test_top_p_keeps_only_the_nucleus():
    row = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    tokens = draw(row, SamplingParams(temperature=1.0, top_p=0.75), seed=0, steps=400)
    assert set(tokens) == {0, 1}  # 0.5 < 0.75 needs the second token; 0.8 >= 0.75 stops there
    assert 0.55 < tokens.count(0) / 400 < 0.70  # renormalised: 0.5 / 0.8 = 0.625


def test_n_samples_for_the_first_token(logits):
    gen = make_generator(5)
    tokens = Sampler().sample(logits, SamplingParams(temperature=1.0, n=4), gen, num_samples=4)
    assert len(tokens) == 4 and all(0 <= t < V for t in tokens)
    assert (
        Sampler().sample(logits, SamplingParams(temperature=0.0, n=3), None, num_samples=3)
        == [int(logits.argmax())] * 3
    )


def test_high_temperature_flattens(logits):
    tokens = draw(logits, SamplingParams(temperature=100.0), seed=9, steps=200)
    assert len(set(tokens)) > 100


def test_banned_tokens_are_never_chosen(logits):
    best = int(logits.argmax())
    assert Sampler().sample(logits, SamplingParams(temperature=0.0), banned_token_ids=[best]) != [best]
    tokens = draw(logits, SamplingParams(temperature=1.0), seed=2, steps=50)
    assert best in tokens
    sampler, gen = Sampler(), make_generator(2)
    assert all(
        sampler.sample(logits, SamplingParams(), gen, banned_token_ids=[best])[0] != best for _ in range(50)
    )


def test_logprobs(logits):
    result = Sampler().logprobs(logits, token=17, top_k=3)
    expected = torch.log_softmax(logits, -1)
    assert math.isclose(result.logprob, float(expected[17]), rel_tol=1e-6)
    assert [t for t, _ in result.top] == torch.topk(logits, 3).indices.tolist()
    assert result.top[0][1] >= result.top[1][1] >= result.top[2][1]
    assert Sampler().logprobs(logits, 3, 0).top == []


def test_degenerate_temperature_and_top_p_never_give_nan(logits):
    sampler = Sampler()
    best = int(logits.argmax())
    assert sampler.sample(logits, SamplingParams(temperature=1e-30), make_generator(1)) == [best]
    assert sampler.sample(logits, SamplingParams(temperature=1.0, top_p=1e-45), make_generator(1)) == [best]
