"""The prefix-cache miss-ratio curve: the hit ratio a pool with more blocks would have had.

Model (docs/kv-events.md has the derivation, the check against the simulator, and the
limits). The engine evicts cached blocks from the front of a free queue kept in LRU order.
A pool `extra` blocks larger holds every cached block `extra` evictions longer. A capacity
miss (block evicted at clock e, stored again at clock r: `d = r - e` evictions apart)
would have been a hit there if it was still cached at r, i.e. if fewer than `extra` of the
larger pool's own evictions happened in between. The larger pool evicts less: each miss it
turns into a hit is one allocation, hence one eviction, fewer. So, in arrival order,

    miss at (e, r) is avoidable  iff  d - (avoidable misses in (e, r]) < extra

which is what `MissRatioCurve.on_miss` decides online (the avoidable misses before it are
known when it is decided). Over a window where the engine queried Q prompt tokens and hit H:

    hit_ratio(extra) = (H + block_size * avoidable_in_window(extra)) / Q

Assumptions: the same requests arrive in the same order (a faster server would see them
sooner); blocks are reused whole (a prompt's last block is recomputed whatever the pool:
rare); no preemption (a preempted request's recomputed blocks count as misses here while
vLLM counts its hits apart). Only evictions within `horizon` clock ticks are remembered.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

POOL_INCREASES: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)  # +25 %, +50 %, +100 %, +200 %


def extra_blocks(pool_blocks: int, increase: float) -> int:
    return max(1, round(pool_blocks * increase))


class MissRatioCurve:
    """Per pool increase, the capacity misses (cumulative) that pool would have hit."""

    __slots__ = ("increases", "horizon", "avoidable", "_times", "_start")

    def __init__(self, increases: tuple[float, ...] = POOL_INCREASES, horizon: int = 1_000_000) -> None:
        self.increases = increases
        self.horizon = horizon
        self.avoidable = dict.fromkeys(increases, 0)
        self._times: dict[float, list[int]] = {f: [] for f in increases}  # clocks of avoided misses
        self._start = dict.fromkeys(increases, 0)

    def on_miss(self, evicted_at: int, now: int, pool_blocks: int) -> None:
        d = now - evicted_at
        for f in self.increases:
            times, start = self._times[f], self._start[f]
            avoided = len(times) - bisect_right(times, evicted_at, start)
            if d - avoided < extra_blocks(pool_blocks, f):
                times.append(now)
                self.avoidable[f] += 1
            self._trim(f, now)

    def _trim(self, f: float, now: int) -> None:
        times, start = self._times[f], self._start[f]
        oldest = now - self.horizon
        while start < len(times) and times[start] < oldest:
            start += 1
        if start > 1024 and start > len(times) // 2:
            del times[:start]
            start = 0
        self._start[f] = start

    def clear(self) -> None:
        """After a reset: nothing that returns counts as avoidable against earlier evictions."""
        for f in self.increases:
            self._times[f].clear()
            self._start[f] = 0


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One point: `extra_blocks` more blocks; `avoidable_blocks` cumulative. `hit_ratio` (A
    with the extra blocks) and `saved_prefill_tokens_per_second` hold over the window they
    were computed for; None where the instance's prefix-cache counters are unknown."""

    increase: float
    extra_blocks: int
    avoidable_blocks: int
    hit_ratio: float | None = None
    saved_prefill_tokens_per_second: float | None = None

    def to_dict(self) -> dict:
        return {
            "increase": self.increase,
            "extra_blocks": self.extra_blocks,
            "avoidable_blocks": self.avoidable_blocks,
            "hit_ratio": self.hit_ratio,
            "saved_prefill_tokens_per_second": self.saved_prefill_tokens_per_second,
        }


def projected_hit_ratio(
    queried_tokens: float, hit_tokens: float, avoidable_blocks: float, block_size: int
) -> float | None:
    """The model's formula (see the module doc); None when nothing was queried."""
    if queried_tokens <= 0:
        return None
    return min(1.0, max(0.0, (hit_tokens + block_size * avoidable_blocks) / queried_tokens))
