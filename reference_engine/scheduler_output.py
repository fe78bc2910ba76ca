"""What one scheduler step asks the model runner to compute.

This is the whole interface between the scheduler (CPU bookkeeping) and the model runner
(tensors): the runner never looks at the block pool, and the scheduler never at tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reference_engine.request import Request


@dataclass(slots=True)
class ScheduledChunk:
    """Compute tokens `[start, start + num_new_tokens)` of `request.token_ids`.

    `block_ids` is the request's block table after this step's allocation; token at
    position p lives in slot `block_ids[p // block_size] * block_size + p % block_size`.
    `samples` is True when the chunk reaches the last known token, so the logits at its
    last position are sampled (a partial prefill chunk samples nothing).
    """

    request: Request
    start: int
    num_new_tokens: int
    block_ids: list[int]
    samples: bool

    @property
    def end(self) -> int:
        return self.start + self.num_new_tokens


@dataclass(slots=True)
class SchedulerOutput:
    """One step. `block_copies` are copy-on-write pairs (src, dst) to apply to every
    layer's KV cache *before* the forward pass."""

    chunks: list[ScheduledChunk] = field(default_factory=list)
    block_copies: list[tuple[int, int]] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def num_batched_tokens(self) -> int:
        return sum(c.num_new_tokens for c in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks
