"""`--kv-cache-metrics`: sampled block residency, measured in the block pool as vLLM 0.33 does
(`vllm/v1/core/kv_cache_metrics.py`), for three histograms:

- lifetime: a sampled block's allocation -> its eviction;
- idle before evict: its last access (or its allocation) -> its eviction;
- reuse gap: the gaps between its consecutive accesses, at most 3 per eviction (the last 4
  accesses are kept); the allocation itself is not an access.

Sampling: each allocation of a block is tracked with probability `sample_rate`. An access is
a prefix-cache hit on the block (the pool's `touch`, which a parallel-sampling fork also
is). An eviction is the block being handed out again; resetting the prefix cache drops the
tracking without observing. Observations wait in `pending` until the one reader (the server's
metrics, through `EngineStats.take_residency`) takes them.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

ResidencyKind = str  # "lifetime" | "idle_before_evict" | "reuse_gap"
RESIDENCY_KINDS: tuple[ResidencyKind, ...] = ("lifetime", "idle_before_evict", "reuse_gap")
ACCESSES_KEPT = 4


@dataclass(slots=True)
class _Tracked:
    born: float
    last_access: float
    accesses: deque[float] = field(default_factory=lambda: deque(maxlen=ACCESSES_KEPT))


class KVResidencyTracker:
    """Keyed by block id; not thread-safe (the engine thread owns the pool)."""

    def __init__(self, sample_rate: float, clock: Callable[[], float], rng: random.Random | None = None):
        if not 0.0 < sample_rate <= 1.0:
            raise ValueError(f"kv_cache_metrics_sample must be in (0, 1], got {sample_rate}")
        self.sample_rate = sample_rate
        self.clock = clock
        self.rng = rng or random.Random()
        self.tracked: dict[int, _Tracked] = {}
        self.pending: list[tuple[ResidencyKind, float]] = []

    def on_allocated(self, block_id: int) -> None:
        if self.rng.random() < self.sample_rate:
            now = self.clock()
            self.tracked[block_id] = _Tracked(now, now)

    def on_accessed(self, block_id: int) -> None:
        t = self.tracked.get(block_id)
        if t is not None:
            t.last_access = self.clock()
            t.accesses.append(t.last_access)

    def on_evicted(self, block_id: int) -> None:
        t = self.tracked.pop(block_id, None)
        if t is None:
            return
        now = self.clock()
        self.pending.append(("lifetime", now - t.born))
        self.pending.append(("idle_before_evict", now - t.last_access))
        history = list(t.accesses)
        self.pending.extend(("reuse_gap", b - a) for a, b in zip(history, history[1:]))

    def reset(self) -> None:
        self.tracked.clear()

    def take(self) -> list[tuple[ResidencyKind, float]]:
        out, self.pending = self.pending, []
        return out
