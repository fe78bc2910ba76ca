"""The engine on real weights: scheduling choices never change greedy tokens, seeded
sampling repeats, and the CLI reports what the engine did."""

import json

import pytest

from harness.cli import main
from reference_engine.config import EngineConfig
from reference_engine.engine_factory import build_engine
from reference_engine.model.registry import load_model
from reference_engine.sampling_params import SamplingParams

TINY_PROMPTS = [list(range(5, 5 + k)) for k in (3, 17, 32, 41, 9, 26)]


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-random")


@pytest.fixture(scope="module")
def smollm2():
    return load_model("smollm2-135m")


def greedy(loaded, prompts, max_tokens=12, **overrides):
    """Runs the prompts in two waves, so the second can hit blocks the first left cached."""
    config = EngineConfig(model=loaded.source, **{"num_blocks": 256, "block_size": 16, **overrides})
    built = build_engine(config, loaded)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    half = len(prompts) // 2
    results = built.engine.generate(prompts[:half], params) + built.engine.generate(prompts[half:], params)
    pool = built.engine.kv.pool
    assert pool.num_free_blocks == pool.num_blocks - 1, "all blocks free after the run"
    return [r.choices[0].output_token_ids for r in results], built.engine.stats


@pytest.mark.parametrize(
    "a, b, check",
    [
        (
            {"enable_prefix_caching": True},
            {"enable_prefix_caching": False},
            lambda sa, sb: sa.prefix_cache_hits > 0,
        ),
        (
            {"num_blocks": 12},
            {"num_blocks": 512},
            lambda sa, sb: sa.num_preemptions > 0 == sb.num_preemptions,
        ),
        (
            {"allocator": "contiguous", "max_model_len": 96, "num_blocks": 64},
            {"max_model_len": 96},
            lambda sa, sb: True,
        ),
        ({"max_num_batched_tokens": 7}, {"max_num_batched_tokens": 4096}, lambda sa, sb: sa.steps > sb.steps),
    ],
    ids=["prefix-cache", "preemption", "contiguous", "chunked-prefill"],
)
def test_tiny_random_greedy_output_is_identical(tiny, a, b, check):
    shared = list(range(100, 140))  # a shared prefix gives the prefix cache something to hit
    prompts = [shared + p[:5] for p in TINY_PROMPTS] + TINY_PROMPTS + [shared + p[-4:] for p in TINY_PROMPTS]
    out_a, stats_a = greedy(tiny, prompts, **a)
    out_b, stats_b = greedy(tiny, prompts, **b)
    assert out_a == out_b
    assert check(stats_a, stats_b)


def test_smollm2_greedy_identical_under_preemption_and_chunking(smollm2):
    prompts = ["The capital of France is", "Water boils at", "My favourite colour is", "Once upon a time"]
    # Two prompts of ~6 tokens + 20 outputs need 2 blocks each; 3 usable blocks force preemption.
    ample, _ = greedy(smollm2, prompts, max_tokens=20)
    tiny_pool, stats = greedy(smollm2, prompts, max_tokens=20, num_blocks=4, max_num_batched_tokens=5)
    assert stats.num_preemptions > 0
    assert tiny_pool == ample


def test_same_seed_twice_with_n_gives_identical_choices(tiny):
    def run():
        built = build_engine(EngineConfig(model="tiny-random", num_blocks=64), tiny)
        (res,) = built.engine.generate(
            [[7, 8, 9, 10, 11]], SamplingParams(max_tokens=8, n=3, temperature=1.0, seed=42)
        )
        return [c.output_token_ids for c in res.choices]

    first, second = run(), run()
    assert first == second
    assert len({tuple(c) for c in first}) > 1, "choices differ from one another"


def test_generate_cli_reports_completions_and_kv_statistics(capsys):
    rc = main(
        [
            "engine",
            "generate",
            "--model",
            "smollm2-135m",
            "--temperature",
            "0",
            "--max-tokens",
            "16",
            "--json",
            "The capital of France is",
            "The chemical symbol for gold is",
        ]
    )
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    texts = [c["choices"][0]["text"] for c in data["completions"]]
    assert "Paris" in texts[0]
    assert "Au" in texts[1]
    stats = data["stats"]
    assert stats["generation_tokens"] == sum(len(c["choices"][0]["token_ids"]) for c in data["completions"])
    assert 0 < stats["peak_kv_usage"] <= 1 and stats["num_preemptions"] == 0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "no-such-model"], "unknown model"),
        (["--model", "/nonexistent/model.gguf"], "no such file"),
        (["--model", "tiny-random", "--num-blocks", "1"], "num_blocks"),
        (["--model", "tiny-random", "--max-tokens", "0"], "max_tokens"),
    ],
)
def test_generate_cli_bad_input_is_a_clear_error(argv, message, capsys):
    assert main(["engine", "generate", *argv, "hello"]) == 2
    assert message in capsys.readouterr().err
