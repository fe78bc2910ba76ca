"""One request of a trace, whatever format it came in (`traces`, `azure_trace`)."""

from __future__ import annotations

from dataclasses import dataclass

MOONCAKE_BLOCK_TOKENS = 512  # tokens per hash id in Mooncake's published traces


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """`arrival_s` counts from the trace's first request; lengths are in tokens (>= 1);
    `hash_ids` name the prompt's shared blocks (Mooncake), empty when the trace has none."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
