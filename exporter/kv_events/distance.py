"""Reuse distances of capacity misses, in a log-linear histogram (bounded memory, ~3% error).

A distance is counted in evictions: how many cached blocks the instance evicted between a
block's own eviction and the moment it was stored again. Values below `EXACT` keep their own
bucket; above it each power of two is cut into `SUB` equal buckets, so a million-block
horizon costs about 300 buckets. `count_below(x)` interpolates linearly inside the bucket
that holds x.
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXACT = 64
SUB = 32


def bucket_of(d: int) -> int:
    if d < EXACT:
        return d
    octave = d.bit_length() - 1  # 2**octave <= d < 2**(octave + 1)
    width = (1 << octave) // SUB
    return EXACT + (octave - EXACT.bit_length() + 1) * SUB + (d - (1 << octave)) // width


def bucket_bounds(b: int) -> tuple[int, int]:
    """[low, high) of bucket b."""
    if b < EXACT:
        return b, b + 1
    octave, sub = divmod(b - EXACT, SUB)
    octave += EXACT.bit_length() - 1
    width = (1 << octave) // SUB
    low = (1 << octave) + sub * width
    return low, low + width


@dataclass(slots=True)
class DistanceHistogram:
    counts: dict[int, int] = field(default_factory=dict)  # bucket -> count
    total: int = 0
    sum: int = 0  # of the exact distances

    def add(self, d: int) -> None:
        d = max(0, d)
        b = bucket_of(d)
        self.counts[b] = self.counts.get(b, 0) + 1
        self.total += 1
        self.sum += d

    def count_below(self, x: float) -> float:
        """Distances < x (interpolated within x's bucket)."""
        out = 0.0
        for b, n in self.counts.items():
            low, high = bucket_bounds(b)
            if high <= x:
                out += n
            elif low < x:
                out += n * (x - low) / (high - low)
        return out

    def to_dict(self) -> dict:
        """Sparse: the buckets' lower bounds and counts, ascending, and the sum."""
        items = sorted(self.counts.items())
        return {
            "low": [bucket_bounds(b)[0] for b, _ in items],
            "count": [n for _, n in items],
            "sum": self.sum,
        }

    @classmethod
    def from_dict(cls, d: dict) -> DistanceHistogram:
        h = cls(sum=int(d.get("sum", 0)))
        for low, n in zip(d.get("low", []), d.get("count", [])):
            h.counts[bucket_of(int(low))] = h.counts.get(bucket_of(int(low)), 0) + int(n)
            h.total += int(n)
        return h

    def clear(self) -> None:
        self.counts.clear()
        self.total = self.sum = 0
