"""Turns a `SchedulerOutput` into tensors, runs the model, and returns the logits to sample.

The runner owns no bookkeeping: block ids come from the scheduler, and the runner only
translates them into slots and block tables. It never allocates, frees or hashes blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from reference_engine.attention.backend import AttentionBackend, TorchAttentionBackend
from reference_engine.attention.kv_cache import LayerKVCache, copy_blocks
from reference_engine.attention.metadata import AttentionMetadata
from reference_engine.scheduler_output import ScheduledChunk, SchedulerOutput

if TYPE_CHECKING:
    from reference_engine.model.native_decode import NativeDecodeStack
    from reference_engine.model.registry import LoadedModel


@dataclass(slots=True)
class ModelOutput:
    """`sample_logits[i]` belongs to the i-th chunk with `samples=True` (chunk order).
    `prompt_logits[request_id][j]` are the logits after token `chunk.start + j`, i.e. the
    distribution of token `chunk.start + j + 1`, for prompt-logprob requests. All fp32."""

    sample_logits: torch.Tensor
    prompt_logits: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass(slots=True)
class StepInputs:
    """The flat batch for one step. `sample_rows` are the hidden-state rows to sample (one per
    sampling chunk, in chunk order); `prompt_rows` maps a request to its chunk's row span."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    sample_rows: list[int]
    prompt_rows: dict[str, tuple[int, int]]


def _wants_prompt_logits(chunk: ScheduledChunk) -> bool:
    req = chunk.request
    return req.sampling_params.prompt_logprobs is not None and chunk.start < req.num_prompt_tokens


def build_step_inputs(
    chunks: list[ScheduledChunk], block_size: int, device: str | torch.device
) -> StepInputs:
    """Flatten chunks request after request (the AttentionMetadata layout).

    Token at position p of a chunk lives in slot `block_ids[p // block_size] * block_size
    + p % block_size`; a block table shorter than the context is a scheduler bug and fails here.
    """
    ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    query_start = [0]
    sample_rows: list[int] = []
    prompt_rows: dict[str, tuple[int, int]] = {}
    for chunk in chunks:
        req, start, end = chunk.request, chunk.start, chunk.end
        if len(chunk.block_ids) * block_size < end:
            raise ValueError(
                f"request {req.request_id}: {len(chunk.block_ids)} blocks cannot hold {end} tokens"
            )
        row0 = len(ids)
        ids.extend(req.token_ids[start:end])
        positions.extend(range(start, end))
        slots.extend(
            chunk.block_ids[p // block_size] * block_size + p % block_size for p in range(start, end)
        )
        query_start.append(len(ids))
        if chunk.samples:
            sample_rows.append(len(ids) - 1)
        if _wants_prompt_logits(chunk):
            prompt_rows[req.request_id] = (row0, len(ids))
    max_blocks = max((len(c.block_ids) for c in chunks), default=0)
    tables = [c.block_ids + [0] * (max_blocks - len(c.block_ids)) for c in chunks]
    seq_lens = [c.end for c in chunks]
    query_lens = [c.num_new_tokens for c in chunks]

    def tensor(values, dtype):
        return torch.tensor(values, dtype=dtype, device=device)

    meta = AttentionMetadata(
        slot_mapping=tensor(slots, torch.long),
        block_tables=tensor(tables, torch.int32).reshape(len(chunks), max_blocks),
        seq_lens=tensor(seq_lens, torch.int32),
        query_start_loc=tensor(query_start, torch.int32),
        max_query_len=max(query_lens, default=0),
        max_seq_len=max(seq_lens, default=0),
        seq_lens_host=seq_lens,
        query_lens_host=query_lens,
    )
    return StepInputs(tensor(ids, torch.long), tensor(positions, torch.long), meta, sample_rows, prompt_rows)


class ModelRunner:
    """Runs one scheduler step on a loaded model over preallocated per-layer KV caches.

    `native`: the model's native decode stack, which runs the decode-only steps it accepts
    (bit for bit what the model's own forward computes, without Python's cost per torch call).
    """

    def __init__(
        self,
        loaded_model: LoadedModel,
        kv_caches: list[LayerKVCache],
        block_size: int,
        attention_backend: AttentionBackend | None = None,
        native: NativeDecodeStack | None = None,
    ):
        if kv_caches and kv_caches[0].block_size != block_size:
            raise ValueError(
                f"KV caches have block size {kv_caches[0].block_size}, runner was given {block_size}"
            )
        self.loaded = loaded_model
        self.model = loaded_model.model
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.backend = attention_backend or TorchAttentionBackend()
        self.native = native
        self.device = self.model.model.embed_tokens.weight.device

    @property
    def vocab_size(self) -> int:
        return self.loaded.config.vocab_size

    def execute(self, out: SchedulerOutput) -> ModelOutput:
        """Apply copy-on-write copies, then one forward pass over every chunk.

        Copies go first: a forked sequence's first decode writes into the copied block, and
        its attention must read the prompt tokens that the copy brings along.
        """
        with torch.inference_mode():
            copy_blocks(self.kv_caches, out.block_copies)
            if not out.chunks:
                return ModelOutput(torch.empty(0, self.vocab_size, device=self.device))
            step = build_step_inputs(out.chunks, self.block_size, self.device)
            if self.native is not None and self.native.applies(step.meta, self.kv_caches, self.backend):
                hidden = self.native.forward(step.input_ids, step.positions, step.meta, self.kv_caches)
            else:
                hidden = self.model(step.input_ids, step.positions, step.meta, self.kv_caches, self.backend)
            spans = list(step.prompt_rows.items())
            rows = step.sample_rows + [r for _, (a, b) in spans for r in range(a, b)]
            logits = self.model.compute_logits(hidden[rows])
            n = len(step.sample_rows)
            prompt_logits, offset = {}, n
            for request_id, (a, b) in spans:
                prompt_logits[request_id] = logits[offset : offset + b - a]
                offset += b - a
            return ModelOutput(sample_logits=logits[:n], prompt_logits=prompt_logits)
