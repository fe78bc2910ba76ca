"""What one request of a given length costs in the pool, and how many such requests the pool
holds at once, from a fit (`fit.PoolFit`) and the server's statement.

A request of L tokens (prompt + output) holds KV for L - 1 of them at its last step, so at
its peak it takes `fixed + ceil((L - 1) / tokens_per_block)` blocks (whole blocks; the line's
value otherwise), and the pool holds floor(usable / that) of them at once. llama.cpp's
slots bound it too: a request runs in one slot, whose n_ctx must hold it. The bound is the
pool's only: the server's max_num_seqs may bind first.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from harness.probe.fit import PoolFit
from harness.probe.stated import StatedPool

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class CapacityModel:
    usable_blocks: int | None = None
    tokens_per_block: float | None = None
    fixed_blocks: float | None = None
    whole_blocks: bool = False
    usage_per_token: float | None = None
    usage_fixed: float | None = None
    slots: tuple[int, ...] = ()
    slot_layout: str | None = None

    @classmethod
    def of(cls, fit: PoolFit, stated: StatedPool) -> CapacityModel:
        return cls(
            fit.usable_blocks,
            fit.tokens_per_block,
            fit.fixed_blocks,
            fit.whole_blocks,
            fit.usage_per_token,
            fit.usage_fixed,
            stated.slots,
            stated.slot_layout,
        )

    @property
    def known(self) -> bool:
        return self.usage_per_token is not None

    def blocks_of(self, tokens: int) -> float | None:
        """Blocks one request of `tokens` (prompt + output) holds at its peak."""
        kv = max(tokens - 1, 0)
        if self.fixed_blocks is None:
            return None
        if not self.tokens_per_block:  # a reservation: the same whatever the length
            return self.fixed_blocks
        grow = math.ceil(kv / self.tokens_per_block) if self.whole_blocks else kv / self.tokens_per_block
        return self.fixed_blocks + grow

    def usage_of(self, tokens: int) -> float | None:
        """The share of the pool one request of `tokens` takes at its peak."""
        blocks = self.blocks_of(tokens)
        if blocks is not None and self.usable_blocks:
            return blocks / self.usable_blocks
        if self.usage_per_token is None or self.usage_fixed is None:
            return None
        return self.usage_fixed + self.usage_per_token * max(tokens - 1, 0)

    def holds(self, tokens: int, usable_blocks: int | None = None) -> int | None:
        """How many requests of `tokens` the pool holds at once (`usable_blocks`: another pool's
        size, for a change); None when the fit is missing."""
        fitting_slots = [n for n in self.slots if n >= tokens] if self.slots else None
        if fitting_slots is not None and self.slot_layout != "unified":
            return len(fitting_slots)
        pool = usable_blocks or self.usable_blocks
        blocks = self.blocks_of(tokens)
        if pool and blocks and blocks > 0:
            bound = math.floor(pool / blocks + EPS)
        else:
            share = self.usage_of(tokens)
            if share is None or share <= 0:
                return None
            scale = (usable_blocks / self.usable_blocks) if usable_blocks and self.usable_blocks else 1.0
            bound = math.floor(scale / share + EPS)
        return bound if fitting_slots is None else min(bound, len(fitting_slots))


@dataclass(frozen=True, slots=True)
class ConcurrencyRow:
    """One length of the table. `naive` is the arithmetic that misleads: the stated pool in
    tokens over this length; `server_figure` the server's own start-up figure (vLLM's
    kv_cache_max_concurrency, at max_model_len only)."""

    label: str
    tokens: int
    blocks_per_request: float | None
    requests: int | None
    naive: float | None
    server_figure: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ConcurrencyRow:
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})


MAX_MODEL_LEN = "max_model_len"


def concurrency_table(
    model: CapacityModel, lengths: list[tuple[str, int]], stated: StatedPool
) -> list[ConcurrencyRow]:
    """One row per (label, prompt + output tokens), then max_model_len when stated."""
    rows = list(lengths)
    if stated.max_model_len and all(label != MAX_MODEL_LEN for label, _ in rows):
        rows.append((MAX_MODEL_LEN, stated.max_model_len))
    capacity = stated.capacity_tokens
    return [
        ConcurrencyRow(
            label,
            tokens,
            model.blocks_of(tokens),
            model.holds(tokens),
            capacity / tokens if capacity and tokens else None,
            stated.max_concurrency if label == MAX_MODEL_LEN else None,
        )
        for label, tokens in rows
    ]
