"""Prompt and output lengths (in tokens) that workloads draw from.

ShareGPT-like lengths: the vLLM paper (Kwon et al., SOSP 2023, Fig. 11) reports mean input
161.31 and mean output 337.99 tokens for ShareGPT (Alpaca: 19.31 / 58.45), and vLLM's
benchmark sampler keeps conversations with prompt >= 4, output >= 4, prompt <= 1024 and
prompt + output <= 2048. We draw from lognormals with those means; the spreads (sigma 1.1
for prompts, heavy-tailed pastes; 0.8 for answers) are our assumption, chosen to give
medians near 87 and 244 tokens. Draws outside vLLM's filter are redrawn, which lowers the
means to ~143 / ~325 (50,000 draws); `requests.parquet` records every target next to what
the server counted, so the achieved distribution is always visible.

A ShareGPT-format JSON file (`--dataset`) replaces the synthetic draw: each conversation's
first human turn and first reply give the lengths, estimated as words * 1.3 tokens.

Fixed-length workloads draw each request's lengths around their mean (`spread`): with
every request the same length, closed-loop users that start together finish together and
send again together, and the load arrives in waves (vLLM's benchmark calls the same knob
--random-range-ratio).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

SHAREGPT_MEAN_PROMPT = 161.31
SHAREGPT_MEAN_OUTPUT = 337.99
PROMPT_SIGMA = 1.1
OUTPUT_SIGMA = 0.8
MIN_LEN, MAX_PROMPT, MAX_TOTAL = 4, 1024, 2048
TOKENS_PER_WORD_ENGLISH = 1.3  # typical BPE ratio for English prose


@dataclass(frozen=True, slots=True)
class LengthPair:
    prompt_tokens: int
    output_tokens: int


def _lognormal_with_mean(rng: random.Random, mean: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)


def sharegpt_like(rng: random.Random, max_total: int = MAX_TOTAL) -> LengthPair:
    """One (prompt, output) pair; `max_total` caps prompt + output (e.g. the model's context)."""
    cap_total = min(MAX_TOTAL, max_total)
    for _ in range(1000):
        p = round(_lognormal_with_mean(rng, SHAREGPT_MEAN_PROMPT, PROMPT_SIGMA))
        o = round(_lognormal_with_mean(rng, SHAREGPT_MEAN_OUTPUT, OUTPUT_SIGMA))
        if p >= MIN_LEN and o >= MIN_LEN and p <= MAX_PROMPT and p + o <= cap_total:
            return LengthPair(p, o)
    return LengthPair(MIN_LEN, MIN_LEN)


def spread(rng: random.Random, mean: int, relative: float) -> int:
    """A length drawn uniformly within +-`relative` of `mean` (at least 1); `mean` itself
    when `relative` is 0. The mean of the draws is `mean` (up to rounding)."""
    if relative <= 0:
        return mean
    return max(1, round(rng.uniform(mean * (1 - relative), mean * (1 + relative))))


def load_sharegpt(path: str | Path, limit: int = 100_000) -> list[LengthPair]:
    """Length pairs from a ShareGPT-format JSON file: a list of {"conversations": [{"from",
    "value"}, ...]}; conversations with fewer than two turns are skipped."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    pairs: list[LengthPair] = []
    for item in data if isinstance(data, list) else []:
        turns = item.get("conversations") if isinstance(item, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, reply = (str((t or {}).get("value", "")) for t in turns[:2])
        p = round(len(first.split()) * TOKENS_PER_WORD_ENGLISH)
        o = round(len(reply.split()) * TOKENS_PER_WORD_ENGLISH)
        if p >= MIN_LEN and o >= MIN_LEN and p <= MAX_PROMPT and p + o <= MAX_TOTAL:
            pairs.append(LengthPair(p, o))
        if len(pairs) >= limit:
            break
    if not pairs:
        raise ValueError(f"{path}: no usable ShareGPT conversations (need 'conversations' with 2+ turns)")
    return pairs


def pick(rng: random.Random, pairs: Sequence[LengthPair], max_total: int) -> LengthPair:
    """A dataset pair, shrunk proportionally when it does not fit `max_total`."""
    pair = rng.choice(pairs)
    total = pair.prompt_tokens + pair.output_tokens
    if total <= max_total:
        return pair
    scale = max_total / total
    return LengthPair(max(1, int(pair.prompt_tokens * scale)), max(1, int(pair.output_tokens * scale)))
