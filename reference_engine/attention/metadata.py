"""The tensors that describe one step's batch to the attention backends.

Batch layout: the step's tokens are flattened to T rows, request after request, in the
order of `SchedulerOutput.chunks`. Request b owns query rows
`[query_start_loc[b], query_start_loc[b+1])`; its context after this step is `seq_lens[b]`
tokens, so its queries sit at positions `seq_lens[b] - query_len_b ... seq_lens[b] - 1` and
attend causally to every context position up to their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor  # [T] int64: block_id * block_size + offset; -1 = padding, never written
    block_tables: torch.Tensor  # [B, max_blocks_per_seq] int32, padded with 0 (the null block)
    seq_lens: torch.Tensor  # [B] int32: context length including this step's tokens
    query_start_loc: torch.Tensor  # [B + 1] int32: cumulative query lengths
    max_query_len: int
    max_seq_len: int
    # Host copies, so the torch path can loop over requests without device syncs.
    seq_lens_host: list[int]
    query_lens_host: list[int]
    # What a backend derives from this metadata once per step and reuses in every layer.
    derived: dict = field(default_factory=dict)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_host)
