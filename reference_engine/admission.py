"""The checks a request must pass before it may enter the engine, as one pure function.

Both sides of the engine-core boundary run it: the API server, so a refusal is a 400 before
any response bytes are sent, and the engine core itself (`LLMEngine.add_request`), which
never trusts its input. One function, so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reference_engine.kv_manager import cdiv
from reference_engine.sampling_params import InvalidRequestError, SamplingParams


@dataclass(frozen=True, slots=True)
class AdmissionLimits:
    """What admission depends on: the context limit, the vocabulary and the KV pool
    (`usable_blocks` excludes the null block)."""

    max_model_len: int
    vocab_size: int
    block_size: int
    usable_blocks: int


def check_admission(token_ids: Sequence[int], params: SamplingParams, limits: AdmissionLimits) -> None:
    """Raise InvalidRequestError (naming the parameter) unless the request can run."""
    params.validate()
    if not token_ids:
        raise InvalidRequestError("the prompt is empty", "prompt")
    if any(not isinstance(t, int) or not 0 <= t < limits.vocab_size for t in token_ids):
        raise InvalidRequestError(f"prompt token ids must be integers in [0, {limits.vocab_size})", "prompt")
    if len(token_ids) >= limits.max_model_len:
        raise InvalidRequestError(
            f"the prompt has {len(token_ids)} tokens, but max_model_len is {limits.max_model_len} "
            "(the prompt must leave room for at least one output token)",
            "prompt",
        )
    longest = min(len(token_ids) + params.max_tokens, limits.max_model_len)
    if cdiv(longest, limits.block_size) > limits.usable_blocks:
        raise InvalidRequestError(
            f"KV pool too small for this request: {longest} tokens need "
            f"{cdiv(longest, limits.block_size)} blocks of {limits.block_size} tokens, the pool has "
            f"{limits.usable_blocks}",
            "max_tokens",
        )
