"""The lengths a live probe sends: a ladder of prompt lengths (short outputs) and one of output
lengths (at one total), every request's KV tokens at its last step a multiple of `unit`.

Why multiples of 256: a request's peak, KV for prompt + output - 1 tokens, is read while it
is alive. With that count a multiple of the block size, its last block fills from its first
token to its last and is held for a whole block of decode steps (or, when the prompt already
reaches into it, for the whole output), long enough to be read; 256 is a multiple of every
power-of-two block size up to 256 (vLLM's 16 on GPU, 128 on CPU; llama.cpp's 1).
A pool too small for 256-token steps gets a smaller unit.

The pool's block count is read from the steps usage climbs while a request decodes, so one
rung must cross a block boundary mid-decode for every block size: with 193 output tokens the
prompt starts half way into a 128-token block (T - 192), which its decode then leaves.
"""

from __future__ import annotations

from dataclasses import dataclass

UNIT = 256
DEFAULT_MAX_KV_TOKENS = 2048  # the longest rung unless the server's limits are lower
SHORT_OUTPUT = 33  # output tokens of the prompt ladder: 32 decode steps after the prefill
OUTPUTS = (65, 193)  # the output ladder
MAX_TOTALS = 4  # prompt-ladder points
MIN_UNIT = 16


@dataclass(frozen=True, slots=True)
class Rung:
    prompt_tokens: int
    output_tokens: int

    @property
    def kv_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens - 1


def unit_for(max_kv_tokens: int) -> int:
    """The largest power-of-two step up to UNIT that leaves at least 3 prompt-ladder points."""
    unit = UNIT
    while unit > MIN_UNIT and max_kv_tokens // unit < 3:
        unit //= 2
    return unit


def ladder(
    max_kv_tokens: int, short_output: int = SHORT_OUTPUT, outputs: tuple[int, ...] = OUTPUTS
) -> list[Rung]:
    """The rungs for requests holding at most `max_kv_tokens` (max_model_len - 1, and what the
    pool can hold for one request). Empty when not even one unit fits. A pool too small for the
    output ladder's lengths gets one longer output: half of the middle total."""
    unit = unit_for(max_kv_tokens)
    steps = max_kv_tokens // unit
    if steps < 1:
        return []
    picks = (
        sorted({round(1 + i * (steps - 1) / (MAX_TOTALS - 1)) for i in range(MAX_TOTALS)})
        if steps > 1
        else [1]
    )
    short = min(short_output, unit)
    rungs = [Rung(k * unit - short + 1, short) for k in picks]
    middle = picks[len(picks) // 2] * unit
    longer = [m for m in outputs if short < m < middle] or [m for m in (middle // 2 + 1,) if m > short]
    return rungs + [Rung(middle - m + 1, m) for m in longer]
