"""Words -> tokens as the *server* counts them, from two probe requests.

Prompt lengths are specified in tokens, but the client has no tokenizer (loading one per
worker costs seconds and gigabytes, and it would be the wrong one for half the servers).
Instead each worker sends two short probes (`max_tokens: 1`) of `PROBE_WORDS` words on the
workload's endpoint and fits `prompt_tokens = overhead + per_word * words` from the
server's `usage`. `overhead` absorbs the chat template (SmolLM2's adds a ~20-token system
prompt); `per_word` is ~1 for real tokenizers and ~5.5 for a byte tokenizer.

The probes are ordinary recorded requests (phase "calibration"), so Locust's count, the
record count and the server's request counter still agree. The fit is exact arithmetic on
integers the server returns for fixed texts, so every worker derives the same calibration
and therefore builds byte-identical shared prefixes. The probe texts are the same in every
run, unlike the workload's (drawn from the run's seed): a rerun may find them cached, which
changes nothing they measure (`usage.prompt_tokens` counts cached tokens too), and their
length stays known, so a small KV pool that admits them once always does.
"""

from __future__ import annotations

from dataclasses import dataclass

PROBE_WORDS: tuple[int, int] = (16, 112)
PROBE_SEEDS: tuple[int, int] = (
    7_000_001,
    7_000_002,
)  # unrelated to workload seeds: no accidental prefix hits


@dataclass(frozen=True, slots=True)
class Calibration:
    """`prompt_tokens ~= overhead + per_word * words` for this server and endpoint."""

    overhead: float = 0.0
    per_word: float = 1.0
    measured: bool = False

    def words_for(self, tokens: int, include_overhead: bool = True) -> int:
        """Words to send so the server counts ~`tokens` prompt tokens (at least 1 word).

        `include_overhead=False` sizes a *part* of a prompt (a shared prefix, a user turn),
        whose tokens add to the template overhead that the whole prompt pays once.
        """
        budget = tokens - (self.overhead if include_overhead else 0.0)
        return max(1, round(budget / self.per_word))

    def tokens_for(self, words: int) -> float:
        return self.overhead + self.per_word * words


def fit(points: list[tuple[int, int]]) -> Calibration:
    """Least squares through (words, prompt_tokens) points; identity when it cannot fit."""
    if len({w for w, _ in points}) < 2:
        return Calibration()
    n = len(points)
    mw = sum(w for w, _ in points) / n
    mt = sum(t for _, t in points) / n
    var = sum((w - mw) ** 2 for w, _ in points)
    slope = sum((w - mw) * (t - mt) for w, t in points) / var
    if not slope > 0:
        return Calibration()
    return Calibration(overhead=max(0.0, mt - slope * mw), per_word=slope, measured=True)
