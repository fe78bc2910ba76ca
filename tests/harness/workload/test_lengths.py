"""How long requests are: calibration of words to server tokens, ShareGPT-like lengths, and
the prompt word list."""

from __future__ import annotations

import random

import pytest

from harness.workload.calibration import Calibration, fit
from harness.workload.lengths import MAX_PROMPT, MAX_TOTAL, sharegpt_like


def test_calibration_fit_recovers_overhead_and_slope() -> None:
    cal = fit([(16, 16 * 5 + 30), (112, 112 * 5 + 30)])
    assert cal.measured and cal.per_word == pytest.approx(5) and cal.overhead == pytest.approx(30)
    assert cal.words_for(530) == 100 and cal.words_for(500, include_overhead=False) == 100
    assert fit([(16, 20)]) == Calibration() and Calibration().words_for(0) == 1


def test_sharegpt_like_lengths_respect_vllm_filter() -> None:
    rng = random.Random(1)
    pairs = [sharegpt_like(rng) for _ in range(5000)]
    assert all(
        4 <= p.prompt_tokens <= MAX_PROMPT and p.prompt_tokens + p.output_tokens <= MAX_TOTAL for p in pairs
    )
    mean_prompt = sum(p.prompt_tokens for p in pairs) / len(pairs)
    assert 120 < mean_prompt < 170  # paper mean 161, lowered a little by the length filter
    assert all(
        p.prompt_tokens + p.output_tokens <= 300 for p in (sharegpt_like(rng, 300) for _ in range(200))
    )


@pytest.mark.slow
def test_prompt_words_are_one_token_each_for_smollm2() -> None:
    """The word list's promise, checked against a real BPE vocabulary (SmolLM2's)."""
    from harness.workload.prompts import WORDS, text
    from reference_engine.model.gguf_loader import _fields, _read
    from reference_engine.model.registry import smollm2_gguf_path
    from reference_engine.model.tokenizer import tokenizer_from_gguf

    path = smollm2_gguf_path()
    tok = tokenizer_from_gguf(_fields(_read(path)), path)
    assert [w for w in WORDS if len(tok.encode(" " + w, add_special_tokens=False)) != 1] == []
    assert len(tok.encode(text(random.Random(0), 1000), add_special_tokens=False)) == 1000


def test_spread_lengths_keep_their_mean_within_their_bounds() -> None:
    import random

    from harness.workload.lengths import spread

    rng = random.Random(1)
    draws = [spread(rng, 200, 0.25) for _ in range(20_000)]
    assert min(draws) >= 150 and max(draws) <= 250 and len(set(draws)) > 90
    assert abs(sum(draws) / len(draws) - 200) < 1.0
    assert {spread(rng, 200, 0.0) for _ in range(100)} == {200}
