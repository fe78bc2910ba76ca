"""The paged Llama forward pass against an independent dense implementation, and the real
SmolLM2 weights against facts a correct model knows (perplexity on prose, "Paris").

Tolerance: the paged path runs in fp32, the dense oracle in fp64; their logits must agree to
max |diff| < 1e-3 (measured 7e-6 for tiny-random and 5e-5 for SmolLM2).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from reference_engine.attention.kv_cache import allocate_kv_caches
from reference_engine.model import load_model
from reference_engine.model.builtin import smollm2_gguf_path
from reference_engine.model.gguf_loader import load_gguf
from reference_engine.model.llama import build_model
from reference_engine.model.projections import replace_projections
from reference_engine.model.registry import LoadedModel
from reference_engine.model_runner import ModelRunner
from reference_engine.request import Request
from reference_engine.sampler import Sampler
from reference_engine.sampling_params import SamplingParams
from reference_engine.scheduler_output import ScheduledChunk, SchedulerOutput

BLOCK = 16
TOL = 1e-3
PROSE = (
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with "
    "her friends. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. "
    'Her mom smiled and said, "Let\'s go home and have lunch." Lily was very happy. After lunch, she took '
    "a nap in her room. When she woke up, she played with her dog in the garden until it was time for dinner."
)


def dense_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """Plain contiguous causal Llama, written from the weights alone (no engine code):
    RoPE as a complex rotation of the pairs (i, i + d/2), attention by SDPA."""
    cfg = model.config
    sd = {k: v.double() for k, v in model.state_dict().items()}
    t, d, half = len(ids), cfg.head_dim, cfg.head_dim // 2

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps))

    freqs = 1.0 / cfg.rope_theta ** (torch.arange(half, dtype=torch.float64) * 2 / d)
    rotation = torch.polar(torch.ones(t, half, dtype=torch.float64), torch.arange(t)[:, None] * freqs)

    def rope(x):  # [heads, T, D]
        y = torch.complex(x[..., :half], x[..., half:]) * rotation
        return torch.cat((y.real, y.imag), dim=-1)

    x = sd["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        h = rms(x, sd[p + "input_layernorm.weight"])
        q = (h @ sd[p + "self_attn.q_proj.weight"].T).view(t, cfg.num_heads, d).transpose(0, 1)
        k = (h @ sd[p + "self_attn.k_proj.weight"].T).view(t, cfg.num_kv_heads, d).transpose(0, 1)
        v = (h @ sd[p + "self_attn.v_proj.weight"].T).view(t, cfg.num_kv_heads, d).transpose(0, 1)
        o = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True, enable_gqa=True)
        x = x + o.transpose(0, 1).reshape(t, -1) @ sd[p + "self_attn.o_proj.weight"].T
        h = rms(x, sd[p + "post_attention_layernorm.weight"])
        x = (
            x
            + (F.silu(h @ sd[p + "mlp.gate_proj.weight"].T) * (h @ sd[p + "mlp.up_proj.weight"].T))
            @ sd[p + "mlp.down_proj.weight"].T
        )
    x = rms(x, sd["model.norm.weight"])
    return (x @ sd.get("lm_head.weight", sd["model.embed_tokens.weight"]).T).float()


def make_runner(loaded: LoadedModel, num_blocks: int = 32) -> ModelRunner:
    c = loaded.config
    caches = allocate_kv_caches(c.num_layers, num_blocks, BLOCK, c.num_kv_heads, c.head_dim, torch.float32)
    return ModelRunner(loaded, caches, BLOCK, None)


def make_request(ids: list[int], rid: str = "r0", prompt_logprobs: int | None = None) -> Request:
    params = SamplingParams(max_tokens=64, temperature=0.0, prompt_logprobs=prompt_logprobs)
    return Request(rid, list(ids), len(ids), params, arrival_time=0.0)


def generate(
    runner: ModelRunner, req: Request, block_ids: list[int], steps: int, first_chunk: int | None = None
):
    """Prefill (optionally in two chunks) then greedy decode; yields the sampled logits per step."""
    prompt_len = req.num_tokens
    cut = first_chunk if first_chunk and first_chunk < prompt_len else 0
    if cut:
        runner.execute(SchedulerOutput([ScheduledChunk(req, 0, cut, block_ids, samples=False)]))
    out = runner.execute(
        SchedulerOutput([ScheduledChunk(req, cut, prompt_len - cut, block_ids, samples=True)])
    )
    sampler = Sampler()
    for step in range(steps + 1):
        logits = out.sample_logits[0]
        yield logits, out
        if step == steps:
            return
        req.token_ids.append(sampler.sample(logits, req.sampling_params)[0])
        out = runner.execute(
            SchedulerOutput([ScheduledChunk(req, req.num_tokens - 1, 1, block_ids, samples=True)])
        )


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return load_model("tiny-random")


@pytest.fixture(scope="module")
def smol() -> LoadedModel:
    return load_model("smollm2-135m")


def check_paged_matches_dense(
    loaded: LoadedModel, prompt: list[int], block_ids: list[int], steps: int
) -> float:
    runner = make_runner(loaded)
    req = make_request(prompt)
    worst = 0.0
    for logits, _ in generate(runner, req, block_ids, steps, first_chunk=len(prompt) // 2 + 3):
        reference = dense_logits(loaded.model, req.token_ids)[-1]
        worst = max(worst, (logits - reference).abs().max().item())
    return worst


class Matmul(torch.nn.Module):
    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t()


def test_fused_projections_rotate_q_and_k_as_the_separate_ones_do(tiny: LoadedModel):
    # A fused q/k/v projection takes the one-call RoPE over q's and k's adjacent heads.
    fused = load_model("tiny-random")
    replace_projections(fused.model, Matmul)
    prompt = torch.randint(0, 256, (21,), generator=torch.Generator().manual_seed(2)).tolist()
    runs = []
    for loaded in (tiny, fused):
        req = make_request(list(prompt))
        runs.append(
            [logits for logits, _ in generate(make_runner(loaded), req, [3, 8], steps=6, first_chunk=9)]
        )
    for a, b in zip(*runs, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)  # only matmul blocking may differ


def test_tiny_random_paged_matches_dense(tiny: LoadedModel):
    prompt = torch.randint(0, 256, (37,), generator=torch.Generator().manual_seed(1)).tolist()
    # Scattered, non-monotonic blocks; 37 + 14 decode tokens cross into the fourth block.
    worst = check_paged_matches_dense(tiny, prompt, [9, 2, 17, 5], steps=14)
    print(f"tiny-random paged vs dense: max |diff| = {worst:.2e}")
    assert worst < TOL


@pytest.mark.slow
def test_smollm2_paged_matches_dense(smol: LoadedModel):
    prompt = smol.tokenizer.encode("Paged attention stores keys and values in fixed-size blocks, so that")
    prompt = prompt + smol.tokenizer.encode(" memory is allocated on demand and shared between sequences.")
    worst = check_paged_matches_dense(smol, prompt, [4, 12, 7], steps=6)
    print(f"SmolLM2 paged vs dense: max |diff| = {worst:.2e} ({len(prompt)} prompt tokens)")
    assert worst < TOL


def perplexity(loaded: LoadedModel, text: str) -> float:
    ids = loaded.tokenizer.encode(text)
    runner = make_runner(loaded)
    req = make_request(ids, prompt_logprobs=0)
    blocks = list(range(1, math.ceil(len(ids) / BLOCK) + 1))
    out = runner.execute(SchedulerOutput([ScheduledChunk(req, 0, len(ids), blocks, samples=True)]))
    logprobs = torch.log_softmax(out.prompt_logits["r0"][:-1], dim=-1)
    nll = -logprobs.gather(1, torch.tensor(ids[1:])[:, None]).mean()
    return math.exp(nll.item())


@pytest.mark.slow
def test_smollm2_perplexity_and_rotary_layout(smol: LoadedModel):
    good = perplexity(smol, PROSE)
    path = smollm2_gguf_path()
    wrong_contents = load_gguf(path, undo_rope_permutation=False)
    wrong = LoadedModel(
        wrong_contents.config,
        build_model(wrong_contents.config, wrong_contents.state_dict, torch.float32, "cpu"),
        wrong_contents.tokenizer,
        path,
    )
    bad = perplexity(wrong, PROSE)
    print(
        f"SmolLM2 perplexity on {len(PROSE.split())} words: {good:.2f}; without Q/K un-permutation: {bad:.2f}"
    )
    assert good < 10
    assert bad > 3 * good


@pytest.mark.slow
def test_smollm2_knows_paris(smol: LoadedModel):
    runner = make_runner(smol)
    req = make_request(smol.tokenizer.encode("The capital of France is"))
    prompt_len = req.num_tokens
    for _ in generate(runner, req, [3, 1], steps=6):
        pass
    text = smol.tokenizer.decode(req.token_ids[prompt_len:])
    print(f"greedy continuation: {text!r}")
    assert "Paris" in text


@pytest.mark.parametrize(("dtype", "tol"), [("float16", 0.1), ("bfloat16", 0.5)])
def test_half_precision_tracks_float32(tiny: LoadedModel, dtype: str, tol: float):
    """Half-precision weights (RoPE and norms still in fp32) stay near the fp32 logits."""
    half = load_model("tiny-random", dtype=dtype)
    ids = list(range(40, 80))
    runs = []
    for loaded in (tiny, half):
        runner = make_runner(loaded)
        req = make_request(ids, prompt_logprobs=0)
        out = runner.execute(SchedulerOutput([ScheduledChunk(req, 0, len(ids), [2, 5, 7], samples=True)]))
        runs.append(out.prompt_logits["r0"])
    assert runs[1].dtype == torch.float32
    assert (runs[1] - runs[0]).abs().max() < tol


def test_rope_scaling_variants_keep_fast_frequencies():
    from dataclasses import replace

    from reference_engine.model.llama import rope_inv_freq
    from reference_engine.model.tiny_random import tiny_random_config

    cfg = replace(tiny_random_config(), head_dim=64, rope_theta=500000.0, max_position_embeddings=131072)
    plain = rope_inv_freq(cfg)
    linear = rope_inv_freq(replace(cfg, rope_scaling={"rope_type": "linear", "factor": 4.0}))
    llama3 = rope_inv_freq(
        replace(
            cfg,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        )
    )
    assert torch.allclose(linear, plain / 4)
    assert llama3[0] == plain[0]  # the fastest frequency is untouched
    assert torch.isclose(llama3[-1], plain[-1] / 8)  # the slowest is divided by the factor
    assert bool((llama3 <= plain).all())
