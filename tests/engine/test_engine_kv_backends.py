"""The engine end to end with the Triton backend and with 8-bit KV caches."""

import pytest

from reference_engine.config import ConfigError, EngineConfig
from reference_engine.engine_factory import build_engine
from reference_engine.model.registry import load_model
from reference_engine.sampling_params import SamplingParams

PROMPTS = [
    "The capital of France is",
    "Water boils at a temperature of",
    "The largest planet in the solar system is",
    "In 1492, Christopher Columbus",
    "The recipe calls for two cups of",
    "Photosynthesis is the process by which",
]


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2-135m")


def generate(loaded, prompts, max_tokens, **overrides):
    built = build_engine(EngineConfig(model=loaded.source, num_blocks=64, **overrides), loaded)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, prompt_logprobs=0)
    results = built.engine.generate(prompts, params)
    tokens = [r.choices[0].output_token_ids for r in results]
    logprobs = [[r.prompt_logprobs[p].logprob for p in sorted(r.prompt_logprobs)] for r in results]
    return tokens, logprobs, built


def test_triton_backend_matches_torch_on_tiny_random():
    tiny = load_model("tiny-random")
    prompts = [list(range(3, 3 + k)) for k in (1, 16, 21)]  # length 1, one exact block, ragged
    torch_out, _, _ = generate(tiny, prompts, 6, attention_backend="torch", max_num_batched_tokens=8)
    triton_out, _, built = generate(tiny, prompts, 6, attention_backend="triton", max_num_batched_tokens=8)
    assert type(built.engine.executor.runner.backend).__name__ == "TritonAttentionBackend"
    assert triton_out == torch_out


def test_triton_backend_matches_torch_on_smollm2(smollm2):
    torch_out, _, _ = generate(smollm2, PROMPTS[:1], 4, attention_backend="torch")
    triton_out, _, _ = generate(smollm2, PROMPTS[:1], 4, attention_backend="triton")
    assert triton_out == torch_out


# Bounds set from a measurement on these six prompts x 16 greedy tokens (2026-11-29):
# int8 agreed on 100% of tokens, mean |delta prompt logprob| 0.020; fp8 agreed on 89.6%,
# mean |delta| 0.060. The bounds leave room for platform noise, not for a broken format.
@pytest.mark.parametrize(
    "kv_dtype, min_agreement, max_mean_logprob_error", [("int8", 0.95, 0.04), ("fp8", 0.8, 0.1)]
)
def test_8bit_kv_agrees_with_full_precision(smollm2, kv_dtype, min_agreement, max_mean_logprob_error):
    base_tokens, base_lp, _ = generate(smollm2, PROMPTS, 16)
    tokens, lp, _ = generate(smollm2, PROMPTS, 16, kv_cache_dtype=kv_dtype)
    pairs = [(a, b) for x, y in zip(tokens, base_tokens) for a, b in zip(x, y)]
    agreement = sum(a == b for a, b in pairs) / len(pairs)
    errors = [abs(a - b) for x, y in zip(lp, base_lp) for a, b in zip(x, y)]
    mean_error = sum(errors) / len(errors)
    print(f"{kv_dtype}: token agreement {agreement:.3f}, mean |delta logprob| {mean_error:.4f}")
    assert agreement >= min_agreement
    assert mean_error <= max_mean_logprob_error


def test_8bit_kv_holds_twice_the_tokens_of_16bit_at_a_fixed_budget(smollm2):
    budget = 64 * 1024 * 1024
    blocks = {
        d: build_engine(
            EngineConfig(model=smollm2.source, kv_cache_memory=budget, kv_cache_dtype=d, dtype="float32"),
            smollm2,
        ).num_blocks
        for d in ("float16", "fp8", "int8")
    }
    assert blocks["fp8"] == 2 * blocks["float16"]
    # int8 keeps a float16 scale per token and head: 2*64/(64+2) = 1.94x at SmolLM2's head_dim 64.
    assert blocks["int8"] >= 1.9 * blocks["float16"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"attention_backend": "triton", "block_size": 4}, "block sizes"),
        ({"attention_backend": "triton", "block_size": 256}, "block sizes"),
        ({"kv_cache_dtype": "int4"}, "kv_cache_dtype"),
        ({"block_size": 12}, "power of two"),
    ],
)
def test_bad_kv_configurations_fail_before_any_request(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_engine(EngineConfig(model="tiny-random", **overrides), load_model("tiny-random"))
