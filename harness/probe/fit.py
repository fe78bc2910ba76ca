"""From the ladder's observations to the pool's measured terms: usable blocks, tokens per
block, fixed blocks per request, capacity in tokens, and the fit's residuals.

The model: a lone request holding KV for T tokens takes `fixed + T / tokens_per_block`
blocks of a pool of `usable` blocks, so its usage share is u(T) = (fixed + T / b) / usable.

1. A least-squares line through (T, u) over the ladder's peaks: its slope is 1 / (b x
   usable), so the pool's capacity in tokens is 1 / slope, whatever the block size; a flat
   line (no growth) means a per-request reservation (a contiguous allocator).
2. The usable block count: usage moves in steps of 1 / usable (each level read while a
   request decoded is a whole number of blocks), so it is the least common denominator of
   the levels read, taken only when whole blocks then explain every point exactly; else the
   server's statement (num_gpu_blocks, less the null block when that is what fits).
3. Blocks per point = u x usable; tokens per block = capacity / usable; fixed = intercept x
   usable. Whole blocks: every point is exactly fixed + ceil(T / b) for one integer b.

Residuals are the linear fit's, in blocks (in usage shares when the block count is unknown).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from harness.bundle.finding import Finding
from harness.probe.observation import RequestObservation
from harness.probe.stated import StatedPool
from harness.probe.usable import usable_points

MAX_POOL_BLOCKS = 10_000_000  # denominators beyond this are float noise, not a pool
LEVEL_TOLERANCE = 1e-9  # a usage level is k / usable to within float rounding
DECIMALS = 6  # a denominator dividing 10**6 is what rounding to 6 places or fewer leaves too
# Tokens a read of a one-token pool may land off its one-step peak (see whole_block_size): on a
# 2-core machine busy beside the probe (a container build), back-to-back reads of llama.cpp's
# /slots landed 7 decode steps short of a 768-token peak.
TOKEN_READ_LAG = 8
FLAT = 1e-12  # |slope x T| below this share of the pool: occupancy does not grow


@dataclass(frozen=True, slots=True)
class FitPoint:
    prompt_tokens: int
    output_tokens: int
    kv_tokens: int
    usage: float  # above the idle level
    blocks: float | None  # usage x usable blocks
    fitted: float  # the line's value, in blocks (usage share when blocks are unknown)
    residual: float


@dataclass(frozen=True, slots=True)
class PoolFit:
    points: tuple[FitPoint, ...] = ()
    usage_per_token: float | None = None  # the line's slope
    usage_fixed: float | None = None  # its intercept
    usable_blocks: int | None = None
    usable_blocks_source: str | None = None
    tokens_per_block: float | None = None  # an integer when whole_blocks
    fixed_blocks: float | None = None
    whole_blocks: bool = False
    capacity_tokens: float | None = None
    residual_unit: str = "blocks"
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def rms_residual(self) -> float | None:
        if not self.points:
            return None
        return math.sqrt(sum(p.residual**2 for p in self.points) / len(self.points))

    @property
    def max_abs_residual(self) -> float | None:
        return max((abs(p.residual) for p in self.points), default=None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["rms_residual"] = self.rms_residual
        d["max_abs_residual"] = self.max_abs_residual
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PoolFit:
        kw = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        kw["points"] = tuple(FitPoint(**p) for p in d.get("points") or ())
        kw["findings"] = tuple(Finding.from_json(f) for f in d.get("findings") or ())
        return cls(**kw)


def line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope); slope 0 when every x is the same."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return my, 0.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def level_denominator(levels: Sequence[float]) -> int | None:
    """The least common denominator of the usage levels read (each k / usable), or None when
    a level is no fraction with a denominator up to MAX_POOL_BLOCKS (noisy usage), or when no
    two levels are one block apart: a single level k / n cannot tell n from n / d for a
    divisor d of k (a reservation shows one level only)."""
    denominator = 1
    for u in levels:
        frac = Fraction(u).limit_denominator(MAX_POOL_BLOCKS)
        if abs(float(frac) - u) > LEVEL_TOLERANCE:
            return None
        denominator = math.lcm(denominator, frac.denominator)
        if denominator > MAX_POOL_BLOCKS:
            return None
    counts = sorted({round(u * denominator) for u in levels})
    if denominator == 1 or not any(b - a == 1 for a, b in zip(counts, counts[1:])):
        return None
    return denominator


def rounding_alike(blocks: int) -> bool:
    """Whether usage over a pool of `blocks` looks like usage rounded to a few decimals: such
    levels (0.47, 0.1875) are fractions over a divisor of 10**DECIMALS either way."""
    return 10**DECIMALS % blocks == 0


def whole_block_size(
    kv_tokens: Sequence[int], blocks: Sequence[float], candidates: Sequence[int]
) -> tuple[int, int, int] | None:
    """(b, fixed, points off) for the first candidate b with blocks == fixed + ceil(T / b) at
    every point. For b = 1, a pool counted in tokens (llama.cpp's slots), a minority of points
    may be up to TOKEN_READ_LAG tokens off: such a pool holds its peak for one decode step only,
    which a read on a busy machine can land beside; `points off` counts them (0 otherwise)."""
    if any(abs(b - round(b)) > 1e-6 for b in blocks):
        return None
    for b in candidates:
        if b < 1:
            continue
        offsets = [round(n) - math.ceil(t / b) for t, n in zip(kv_tokens, blocks)]
        fixed = Counter(offsets).most_common(1)[0][0]
        off = sum(o != fixed for o in offsets)
        slack = TOKEN_READ_LAG if b == 1 else 0
        # no request holds fewer blocks than its tokens fill; most points exact, so `fixed` is theirs
        if fixed >= 0 and 2 * off < len(offsets) and all(abs(o - fixed) <= slack for o in offsets):
            return b, fixed, off
    return None


def _pool_blocks(
    levels: Sequence[float], tokens: Sequence[int], usage: Sequence[float], stated: StatedPool
) -> tuple[int | None, str | None, list[Finding]]:
    """The usable block count: measured from the levels when whole blocks then explain every
    point, else stated (num_gpu_blocks - 1 or num_gpu_blocks, whichever makes whole blocks)."""
    measured = level_denominator(levels)
    if (
        measured
        and rounding_alike(measured)
        and measured not in (stated.num_blocks, (stated.num_blocks or 0) - 1)
    ):
        measured = None  # rounded usage, unless the server's own pool size says otherwise
    tried = [(measured, f"measured: usage moves in steps of 1/{measured}")] if measured else []
    if stated.num_blocks:
        tried += [
            (stated.num_blocks - 1, f"stated: num_gpu_blocks {stated.num_blocks} less the null block"),
            (stated.num_blocks, f"stated: num_gpu_blocks {stated.num_blocks}"),
        ]
    for blocks, source in tried:
        if blocks and blocks > 0 and _explains(tokens, usage, blocks, stated):
            notes = (
                []
                if blocks == measured
                else [Finding("pool_blocks_from_statement", f"usable blocks {source}")]
            )
            return blocks, source, notes
    if measured and not stated.num_blocks:
        return measured, f"measured: usage moves in steps of 1/{measured}", []
    return (
        None,
        None,
        [
            Finding(
                "pool_blocks_unmeasured",
                "the pool's block count could not be measured (usage is not a whole number of blocks "
                "over one pool size) nor taken from the server's statement: figures stay in tokens",
            )
        ],
    )


def _whole(
    tokens: Sequence[int], usage: Sequence[float], blocks: int, stated: StatedPool
) -> tuple[int, int, int] | None:
    """(tokens per block, fixed blocks, points off) when whole blocks of one size explain every
    point (see whole_block_size)."""
    per_point = [u * blocks for u in usage]
    _, slope = line(tokens, per_point)
    if slope <= 0:
        return None
    candidates = [c for c in (round(1 / slope), stated.block_size) if c]
    return whole_block_size(tokens, per_point, candidates)


def _explains(tokens: Sequence[int], usage: Sequence[float], blocks: int, stated: StatedPool) -> bool:
    """Whether a pool of `blocks` usable blocks makes every point whole blocks (of one size,
    or one reservation when occupancy does not grow)."""
    per_point = [u * blocks for u in usage]
    if any(abs(n - round(n)) > 1e-6 for n in per_point):
        return False
    if len({round(n) for n in per_point}) == 1:
        return True
    return _whole(tokens, usage, blocks, stated) is not None


def fit_pool(obs: Sequence[RequestObservation], stated: StatedPool) -> PoolFit:
    """The pool's measured terms from the ladder's observations (see the module doc)."""
    points, notes = usable_points(obs)
    if len({o.kv_tokens for o in points}) < 2:
        notes.append(
            Finding(
                "too_few_points",
                f"{len(points)} usable ladder point(s) at {len({o.kv_tokens for o in points})} distinct "
                "length(s): at least two lengths are needed for a fit",
            )
        )
        return PoolFit(findings=tuple(notes))
    tokens = [o.kv_tokens for o in points]
    usage = [float(o.peak_usage or 0.0) for o in points]
    c0, slope = line(tokens, usage)
    levels = [lv for o in points for lv in o.levels] + usage
    blocks, source, pool_notes = _pool_blocks(levels, tokens, usage, stated)
    notes += pool_notes
    flat = abs(slope) * max(tokens) < FLAT or slope <= 0
    scale = blocks or 1
    fitted = [(c0 + slope * t) * scale for t in tokens]
    fit_points = tuple(
        FitPoint(
            o.prompt_tokens, o.output_tokens, t, u, None if blocks is None else u * blocks, f, u * scale - f
        )
        for o, t, u, f in zip(points, tokens, usage, fitted)
    )
    common = dict(
        points=fit_points,
        usage_per_token=slope,
        usage_fixed=c0,
        usable_blocks=blocks,
        usable_blocks_source=source,
        residual_unit="blocks" if blocks else "usage share",
    )
    if flat:
        fixed = sum(usage) / len(usage) * blocks if blocks else None
        capacity = blocks * stated.block_size if blocks and stated.block_size else None
        notes.append(
            Finding(
                "fixed_reservation",
                "occupancy does not grow with the request's tokens: each request holds "
                + (f"{fixed:,.0f} blocks" if fixed is not None else f"{usage[0]:.2%} of the pool")
                + " whatever its length (a per-request reservation, as a contiguous allocator makes)",
            )
        )
        whole = fixed is not None and abs(fixed - round(fixed)) < 1e-6
        return PoolFit(
            **common,
            fixed_blocks=round(fixed) if whole else fixed,
            whole_blocks=whole,
            capacity_tokens=capacity,
            findings=tuple(notes),
        )
    capacity_tokens = 1 / slope
    whole = _whole(tokens, usage, blocks, stated) if blocks else None
    if whole is not None:
        b, fixed, off = whole
        if off:
            notes.append(
                Finding(
                    "peak_read_lag",
                    f"{off} of {len(tokens)} point(s) read up to {TOKEN_READ_LAG} token(s) off their length "
                    "(a pool counted in tokens holds its peak for one decode step, and a read on a busy "
                    "machine can land beside it); the others are exact",
                )
            )
        return PoolFit(
            **common,
            tokens_per_block=b,
            fixed_blocks=fixed,
            whole_blocks=True,
            capacity_tokens=blocks * b,
            findings=tuple(notes),
        )
    if blocks:
        notes.append(
            Finding(
                "not_whole_blocks",
                "no whole block size explains every point exactly: tokens per block and fixed blocks "
                "are the line's (see the residuals)",
            )
        )
    return PoolFit(
        **common,
        tokens_per_block=None if not blocks else capacity_tokens / blocks,
        fixed_blocks=None if not blocks else c0 * blocks,
        capacity_tokens=capacity_tokens,
        findings=tuple(notes),
    )
