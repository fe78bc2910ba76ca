"""One engine instance's cached blocks, rebuilt from its events, and what they show.

Per medium (vLLM's "GPU", "CPU", SGLang's "CPU_PINNED", ...; None counts as "GPU") a
`Tier` keeps:
- `cached`: key -> `Entry` for every block stored and not yet removed, with a count (vLLM
  does not de-duplicate: two requests that computed the same prefix at once store it twice
  and each physical block is removed once), its parent's key and its depth in the chain;
  the key is the hash (or (group_idx, hash) for a group other than 0);
- `evicted`: key -> the eviction clock when its last copy was removed, for blocks that may
  come back; bounded by `history` (oldest first out);
- `clock`: blocks removed so far (one tick per removed copy: each is an allocation that
  evicted a cached block);
- counters, the reuse distances of capacity misses and the miss-ratio curve (`curve`).

A capacity miss is a store of a block whose last copy was evicted `d` ticks before: with `d`
more blocks it would still have been cached (docs/kv-events.md). A first store is a block
never seen (or evicted beyond the history). `reuse` of an entry counts the BlockStored
events whose parent it is (a new continuation of the prefix that ends there).

Memory is bounded: at most `max_blocks` entries per tier (the oldest are dropped and
counted as `overflow`), `history` evicted keys, and the histogram's buckets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from exporter.kv_events.curve import MissRatioCurve
from exporter.kv_events.distance import DistanceHistogram
from exporter.kv_events.wire import REMOVED, STORED

PRIMARY = "GPU"
DEFAULT_MAX_BLOCKS = 1_000_000
DEFAULT_HISTORY = 1_000_000


class Entry:
    __slots__ = ("count", "parent", "depth", "reuse")

    def __init__(self, parent: Any, depth: int) -> None:
        self.count = 1
        self.parent = parent
        self.depth = depth
        self.reuse = 0


@dataclass(slots=True)
class Tier:
    max_blocks: int = DEFAULT_MAX_BLOCKS
    history: int = DEFAULT_HISTORY
    cached: dict[Any, Entry] = field(default_factory=dict)
    evicted: dict[Any, int] = field(default_factory=dict)
    reused: dict[Any, Entry] = field(default_factory=dict)  # entries with reuse > 0
    clock: int = 0
    stored_blocks: int = 0
    removed_blocks: int = 0
    first_stores: int = 0
    capacity_misses: int = 0
    duplicate_stores: int = 0
    unknown_removes: int = 0
    overflow: int = 0
    peak_cached: int = 0
    block_size: int = 0
    pool_blocks: int | None = None  # the engine's stated capacity; None: the peak cached count
    distances: DistanceHistogram = field(default_factory=DistanceHistogram)
    curve: MissRatioCurve = field(default_factory=MissRatioCurve)

    def __post_init__(self) -> None:
        self.curve.horizon = self.history

    def store(self, keys: list[Any], parent: Any, block_size: int) -> None:
        cached = self.cached
        if block_size:
            self.block_size = block_size
        above = cached.get(parent) if parent is not None else None
        if above is not None:
            above.reuse += 1
            self.reused[parent] = above
        depth = above.depth if above is not None else 0
        for key in keys:
            depth += 1
            self.stored_blocks += 1
            entry = cached.get(key)
            if entry is not None:
                entry.count += 1
                self.duplicate_stores += 1
            else:
                cached[key] = Entry(parent, depth)
                when = self.evicted.pop(key, None)
                if when is None:
                    self.first_stores += 1
                else:
                    self.capacity_misses += 1
                    self.distances.add(self.clock - when)
                    self.curve.on_miss(when, self.clock, self.pool_blocks or max(1, self.peak_cached))
            parent = key
        if len(cached) > self.peak_cached:
            self.peak_cached = len(cached)
            if self.peak_cached > self.max_blocks:
                self._shed()

    def remove(self, keys: Iterable[Any]) -> None:
        cached = self.cached
        for key in keys:
            entry = cached.get(key)
            if entry is None:
                self.unknown_removes += 1
                continue
            self.removed_blocks += 1
            self.clock += 1
            entry.count -= 1
            if entry.count == 0:
                del cached[key]
                self.reused.pop(key, None)
                evicted = self.evicted
                evicted[key] = self.clock
                if len(evicted) > self.history:
                    del evicted[next(iter(evicted))]

    def clear(self) -> None:
        """Everything is gone, and not for lack of room: nothing that returns is a miss."""
        self.cached.clear()
        self.evicted.clear()
        self.reused.clear()
        self.curve.clear()

    def _shed(self) -> None:
        while len(self.cached) > self.max_blocks:
            key = next(iter(self.cached))
            del self.cached[key]
            self.reused.pop(key, None)
            self.overflow += 1
        self.peak_cached = len(self.cached)


def _key(block_hash: Any, group: int | None) -> Any:
    return block_hash if not group else (group, block_hash)


@dataclass(slots=True)
class InstanceBlocks:
    """All tiers of one instance (one publisher, one data-parallel rank)."""

    max_blocks: int = DEFAULT_MAX_BLOCKS
    history: int = DEFAULT_HISTORY
    tiers: dict[str, Tier] = field(default_factory=dict)
    batches: int = 0
    cleared: int = 0
    last_ts: float | None = None

    def tier(self, medium: str | None) -> Tier:
        name = medium or PRIMARY
        t = self.tiers.get(name)
        if t is None:
            t = self.tiers[name] = Tier(self.max_blocks, self.history)
        return t

    def apply(self, events: list[Any], ts: float) -> None:
        self.batches += 1
        self.last_ts = ts
        for e in events:
            if isinstance(e, STORED):
                g = e.group_idx
                keys = [_key(h, g) for h in e.block_hashes] if g else e.block_hashes
                parent = None if e.parent_block_hash is None else _key(e.parent_block_hash, g)
                self.tier(e.medium).store(keys, parent, e.block_size)
            elif isinstance(e, REMOVED):
                g = e.group_idx
                self.tier(e.medium).remove(_key(h, g) for h in e.block_hashes)
            else:
                self.cleared += 1
                for t in self.tiers.values():
                    t.clear()

    def reset(self) -> None:
        """The publisher restarted: a new engine process starts with an empty cache."""
        for t in self.tiers.values():
            t.clear()
