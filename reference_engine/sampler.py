"""Token sampling: greedy, temperature, top-p; seeded per sequence; logprobs.

Reproducibility rule: a sequence's randomness comes only from its own generator, seeded
from (request seed, choice index). So the same seed gives the same tokens whatever else
shares the batch, and choices of an n>1 request differ from each other.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import torch

from reference_engine.engine import TokenLogprob
from reference_engine.sampling_params import SamplingParams

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    """A well-mixed 64-bit hash, so seeds (s, i) and (s, i+1) give unrelated streams."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def make_generator(seed: int | None, index: int = 0, device: str | torch.device = "cpu") -> torch.Generator:
    """A generator for choice `index` of a request. `seed=None` draws fresh OS entropy."""
    base = secrets.randbits(63) if seed is None else seed
    gen = torch.Generator(device=device)
    gen.manual_seed(_splitmix64(_splitmix64(base & _MASK64) ^ index) >> 1)
    return gen


class Sampler:
    """Stateless: all per-sequence state is the caller's generator."""

    def sample(
        self,
        logits: torch.Tensor,
        params: SamplingParams,
        generator: torch.Generator | None = None,
        num_samples: int = 1,
        banned_token_ids: Sequence[int] = (),
    ) -> list[int]:
        """Draw `num_samples` tokens (independently, with replacement) from one logits row.

        `num_samples = n` is for the first token of an n>1 request, whose choices then
        continue as separate sequences. `banned_token_ids` are never chosen (EOS before
        `min_tokens`).
        """
        row = logits.detach().float().reshape(-1)
        if generator is not None and row.device != generator.device:
            row = row.to(generator.device)  # a generator draws only on its own device
        if banned_token_ids:
            row = row.clone()
            row[list(banned_token_ids)] = float("-inf")
        if params.greedy:
            return [int(row.argmax())] * num_samples
        probs = torch.softmax(row / params.temperature, dim=-1)
        if params.top_p < 1.0:
            probs = _top_p(probs, params.top_p)
        picks = torch.multinomial(probs, num_samples, replacement=True, generator=generator)
        return [int(t) for t in picks]

    def logprobs(self, logits: torch.Tensor, token: int, top_k: int = 0) -> TokenLogprob:
        """The chosen token's logprob and the `top_k` best alternatives, from the raw model
        distribution (before temperature and top-p, as vLLM and OpenAI report them)."""
        row = torch.log_softmax(logits.detach().float().reshape(-1), dim=-1)
        chosen = row[token]
        top: list[tuple[int, float]] = []
        if top_k > 0:
            values, indices = torch.topk(row, min(top_k, row.numel()))
            top = list(zip(indices.tolist(), values.tolist(), strict=True))
        return TokenLogprob(token_id=token, logprob=float(chosen), top=top)


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches `top_p` (at least one)."""
    sorted_probs, order = torch.sort(probs, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    drop = mass_before >= top_p
    drop[0] = False  # a top_p that rounds to 0 in float32 must still keep the best token
    sorted_probs[drop] = 0.0
    kept = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return kept / kept.sum()
