"""Workload evidence: how long the requests really were, and how much prefix sharing the
prompts offer against what the cache got.

Lengths: prompt + output tokens of every completed request, against max_model_len. The
context cut the advisor proposes is the p99.9 of that total rounded up (to a power of two
below 1,024 tokens, else to a multiple of 1,024): a limit almost every request fits in,
with the few longer ones counted so the cost of the cut is visible.

Prefixes: from the per-request prompt fingerprints (`fingerprint`, columns
prompt_chunk_hashes / prompt_chunk_chars / prompt_chars); characters are converted to
tokens with each request's own prompt_tokens / prompt_chars. The hit shares are the
prompt tokens an unbounded prefix cache would hit (shared with an earlier request, whole
blocks only), as the prompts are and with the near-identical spans moved out of the way.
The observed share comes from the server's prefix-cache counters (or, without them, the
requests' cached_tokens). Without fingerprints the prefix part is None, never zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.advisor.conversations import Turn, cached_tokens, conversation_turns
from harness.advisor.prefixes import PromptShape, Sharing, analyse, prompt_shape
from harness.advisor.run_inputs import RunInputs
from harness.workload import fingerprint as fp


@dataclass(frozen=True, slots=True)
class LengthEvidence:
    requests: int
    max_model_len: int | None
    p50_tokens: float
    p99_tokens: float
    p999_tokens: float
    max_tokens: int
    prompt_p50_tokens: float
    prompt_p99_tokens: float
    output_p99_tokens: float
    max_share_of_limit: float | None  # longest request / max_model_len: how much is ever used
    suggested_max_model_len: int
    over_suggested: int  # completed requests longer than the suggestion


@dataclass(frozen=True, slots=True)
class PrefixEvidence:
    requests: int  # fingerprinted requests
    prompt_tokens: int
    identical_hit_tokens: int  # an unbounded cache's hits with the prompts as they are
    near_hit_tokens: int  # ... with near-identical spans made identical (moved after the shared part)
    observed_hit_ratio: float | None
    near_identical_requests: int  # prompts whose shared part is blocked by a differing span
    hole_start_chars_p50: float | None  # where the differing span typically starts...
    hole_end_chars_p50: float | None  # ...and ends (characters into the prompt)
    blocked_tokens_p50: float | None  # tokens shared after the span, per affected request

    @property
    def identical_hit_ratio(self) -> float:
        return self.identical_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def near_hit_ratio(self) -> float:
        return self.near_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass(frozen=True, slots=True)
class WorkloadEvidence:
    lengths: LengthEvidence | None
    prefixes: PrefixEvidence | None
    sharing: tuple[Sharing, ...] = ()  # per completed request (same order as `completed`), for the replays
    prompt_chars: tuple[int, ...] = ()  # per completed request, to turn shared characters into tokens
    turns: tuple[Turn, ...] = ()  # per completed request: its place in a conversation (`conversations`)

    def prefix_groups(self, done: pd.DataFrame, near: bool = False) -> list[tuple[int, int]]:
        """(replay group, shared prefix tokens) per completed request: the prompts as they
        are, or (`near`) with their near-identical spans moved after the shared part.

        Fingerprints see sharing only up to the last chunk boundary inside the shared part, a
        coarse measure when a prompt has few words. The server's own counts correct that:
        a request served with C cached tokens shares at least C, and so does every request
        of its group whose fingerprint shares as much as its own (the same branch).

        A request the fingerprints see sharing nothing, served with C cached tokens, shares C
        tokens the client never sent: what the server puts first (a chat template's system
        turn). Such requests are one group of their own, each with its C."""
        rows = list(zip(self.sharing, self.prompt_chars, done["prompt_tokens"].astype(int)))
        as_is = [_tokens(s.shared_chars, chars, prompt) for s, chars, prompt in rows]
        cached = cached_tokens(done)
        floor: dict[tuple[int, int], int] = {}  # (group, fingerprint's share) -> most cached
        for (s, _, _), tokens, c in zip(rows, as_is, cached):
            if s.group >= 0:
                floor[(s.group, tokens)] = max(floor.get((s.group, tokens), 0), c)
        server_side = 1 + max((max(s.group, s.near_group) for s in self.sharing), default=-1)
        out = []
        for (s, chars, prompt), share, c in zip(rows, as_is, cached):
            group, tokens = (
                (s.near_group, _tokens(s.near_shared_chars, chars, prompt)) if near else (s.group, share)
            )
            if s.group >= 0:  # a near-identical share contains the identical one
                tokens = max(tokens, min(prompt - 1, floor[(s.group, share)]))
            elif group < 0 and c > 0:
                group, tokens = server_side, min(prompt - 1, c)
            out.append((group, tokens) if group >= 0 and tokens > 0 else (-1, 0))
        return out


def _tokens(shared_chars: int, chars: int, prompt: int) -> int:
    """Shared characters as tokens, at the prompt's own tokens per character."""
    return min(prompt - 1, int(shared_chars * prompt / chars)) if chars else 0


def completed(requests: pd.DataFrame) -> pd.DataFrame:
    """Requests with known prompt and output token counts (what a replay can reproduce)."""
    ok = requests["ok"].fillna(False).astype(bool) if "ok" in requests.columns else True
    p = pd.to_numeric(requests["prompt_tokens"], errors="coerce")
    o = pd.to_numeric(requests["output_tokens"], errors="coerce")
    return requests[ok & p.notna() & o.notna() & (p > 0) & (o > 0)].reset_index(drop=True)


def round_up_limit(tokens: float) -> int:
    """Next power of two under 1,024 tokens, else next multiple of 1,024 (at least 256)."""
    tokens = max(1.0, float(tokens))
    if tokens <= 1024:
        return max(256, 1 << math.ceil(math.log2(tokens)))
    return 1024 * math.ceil(tokens / 1024)


def length_evidence(done: pd.DataFrame, max_model_len: int | None) -> LengthEvidence | None:
    if done.empty:
        return None
    prompt = done["prompt_tokens"].astype(float).to_numpy()
    output = done["output_tokens"].astype(float).to_numpy()
    total = prompt + output
    p999 = float(np.percentile(total, 99.9))
    suggested = round_up_limit(p999)
    return LengthEvidence(
        requests=len(total),
        max_model_len=max_model_len,
        p50_tokens=float(np.percentile(total, 50)),
        p99_tokens=float(np.percentile(total, 99)),
        p999_tokens=p999,
        max_tokens=int(total.max()),
        prompt_p50_tokens=float(np.percentile(prompt, 50)),
        prompt_p99_tokens=float(np.percentile(prompt, 99)),
        output_p99_tokens=float(np.percentile(output, 99)),
        max_share_of_limit=float(total.max()) / max_model_len if max_model_len else None,
        suggested_max_model_len=suggested,
        over_suggested=int((total > suggested).sum()),
    )


def has_fingerprints(requests: pd.DataFrame) -> bool:
    return fp.HASHES_COLUMN in requests.columns and fp.CHARS_COLUMN in requests.columns


def observed_hit_ratio(inputs: RunInputs, done: pd.DataFrame) -> float | None:
    """Server counters over the run (first to last sample), else the requests' cached tokens."""
    s = inputs.server
    if {"prefix_cache_queries_tokens", "prefix_cache_hits_tokens"} <= set(s.columns):
        q = pd.to_numeric(s["prefix_cache_queries_tokens"], errors="coerce").dropna()
        h = pd.to_numeric(s["prefix_cache_hits_tokens"], errors="coerce").dropna()
        if len(q) >= 2 and len(h) >= 2 and q.iloc[-1] > q.iloc[0]:
            return float(min(1.0, max(0.0, (h.iloc[-1] - h.iloc[0]) / (q.iloc[-1] - q.iloc[0]))))
    for column in ("cached_tokens", "server_cached_prompt_tokens"):
        if column in done.columns and done[column].notna().any():
            prompt = done["prompt_tokens"].astype(float).sum()
            return (
                float(pd.to_numeric(done[column], errors="coerce").fillna(0).sum() / prompt)
                if prompt
                else None
            )
    return None


def prefix_evidence(
    inputs: RunInputs, done: pd.DataFrame
) -> tuple[PrefixEvidence | None, tuple[Sharing, ...], tuple[int, ...]]:
    if done.empty or not has_fingerprints(done):
        return None, (), ()
    shapes = [prompt_shape(h, c) for h, c in zip(done[fp.HASHES_COLUMN], done[fp.CHARS_COLUMN])]
    sharing = tuple(analyse(shapes))
    block = inputs.deployment.engine.block_size
    prompt = done["prompt_tokens"].astype(int).to_numpy()
    chars = _total_chars(done, shapes)
    identical = near = 0
    holes: list[tuple[int, int, float]] = []
    for i, s in enumerate(sharing):
        per_char = prompt[i] / chars[i] if chars[i] else 0.0
        identical += _hit_tokens(s.hit_chars * per_char, prompt[i], block)
        near += _hit_tokens(s.near_hit_chars * per_char, prompt[i], block)
        if s.hole_start_chars is not None and s.hole_end_chars is not None:
            holes.append(
                (s.hole_start_chars, s.hole_end_chars, (s.near_shared_chars - s.shared_chars) * per_char)
            )

    def median(k: int) -> float | None:
        return float(np.median([h[k] for h in holes])) if holes else None

    return (
        PrefixEvidence(
            requests=len(shapes),
            prompt_tokens=int(prompt.sum()),
            identical_hit_tokens=identical,
            near_hit_tokens=max(near, identical),
            observed_hit_ratio=observed_hit_ratio(inputs, done),
            near_identical_requests=len(holes),
            hole_start_chars_p50=median(0),
            hole_end_chars_p50=median(1),
            blocked_tokens_p50=median(2),
        ),
        sharing,
        tuple(chars),
    )


def _total_chars(done: pd.DataFrame, shapes: list[PromptShape]) -> list[int]:
    covered = [sum(s.chars) for s in shapes]
    if fp.TOTAL_COLUMN not in done.columns:
        return covered
    totals = pd.to_numeric(done[fp.TOTAL_COLUMN], errors="coerce").fillna(0).astype(int).tolist()
    return [max(t, c) for t, c in zip(totals, covered)]


def _hit_tokens(tokens: float, prompt_tokens: int, block: int) -> int:
    """Whole blocks only, and never the last prompt token (an engine always computes it)."""
    usable = min(int(tokens), prompt_tokens - 1)
    return max(0, usable // block * block)


def workload_evidence(inputs: RunInputs) -> WorkloadEvidence:
    done = completed(inputs.requests)
    prefixes, sharing, chars = prefix_evidence(inputs, done)
    lengths = length_evidence(done, inputs.deployment.max_model_len)
    return WorkloadEvidence(lengths, prefixes, sharing, chars, tuple(conversation_turns(done)))
