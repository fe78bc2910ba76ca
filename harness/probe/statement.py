"""A verdict's effect in measured terms: "holds 22 requests at your p90 length, 31 with the
change", from a probe's fit rather than from the arithmetic.

For the advisor's add_memory, quantize_kv_cache and cut_context verdicts: `CapacityChange`
is what the verdict's change does to the pool (its size with the null block, as vLLM's
num_gpu_blocks and the advisor's `Change.num_blocks` count it; replicas; max_model_len), and
`measured_effect` says how many requests of a given length the pool holds before and after.

- A larger pool keeps the probe's per-request cost and the measured gap between the stated
  and the usable pool (the null block): usable after = stated after - (stated - usable).
  Without a stated size, the usable pool scales with the stated ratio.
- Replicas multiply what one pool holds (each replica serves its share of the load).
- A smaller max_model_len changes a request's cost only under a reservation (a contiguous
  allocator reserves max_model_len per request, which the probe sees as blocks that do not
  grow with tokens); on a paged pool a request of the given length costs the same, and the
  statement says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.probe.capacity import CapacityModel
from harness.probe.result import ProbeResult


@dataclass(frozen=True, slots=True)
class CapacityChange:
    pool_blocks: int | None = None  # the pool after the change, null block included
    replicas: int = 1
    max_model_len: int | None = None


@dataclass(frozen=True, slots=True)
class MeasuredEffect:
    label: str
    tokens: int
    before: int
    after: int
    text: str


def usable_after(result: ProbeResult, pool_blocks: int | None) -> int | None:
    """The usable blocks of the changed pool (None: unchanged)."""
    usable, stated = result.fit.usable_blocks, result.stated.num_blocks
    if pool_blocks is None or not usable:
        return None
    if stated:
        return max(pool_blocks - (stated - usable), 1)
    return None


def _reservation_after(result: ProbeResult, change: CapacityChange) -> CapacityModel | None:
    """The per-request cost under a smaller max_model_len when requests hold a reservation
    (None: the change leaves a request's cost as it is)."""
    model, stated = result.model, result.stated
    reserved = not model.tokens_per_block and model.fixed_blocks
    if reserved and change.max_model_len and stated.max_model_len and stated.block_size:
        per_request = math.ceil(change.max_model_len / stated.block_size)
        return CapacityModel(model.usable_blocks, None, per_request, True, slots=model.slots)
    return None


def measured_effect(
    result: ProbeResult, change: CapacityChange, tokens: int, label: str = "p90"
) -> MeasuredEffect | None:
    """How many requests of `tokens` (prompt + output) the pool holds now and with the change;
    None when the probe measured no per-request cost."""
    before = result.model.holds(tokens)
    if before is None:
        return None
    reservation = _reservation_after(result, change)
    one = (reservation or result.model).holds(tokens, usable_after(result, change.pool_blocks))
    if one is None:
        return None
    after = one * max(change.replicas, 1)
    where = f"at your {label} length ({tokens:,} tokens)"
    if change.max_model_len and reservation is None and after == before:
        text = (
            f"holds {before:,} requests {where}, {after:,} with the change too: on a paged pool a request "
            "costs its own tokens, whatever max_model_len is"
        )
    else:
        per = f" ({one:,} per replica x {change.replicas})" if change.replicas > 1 else ""
        text = f"holds {before:,} requests {where}, {after:,} with the change{per}"
    return MeasuredEffect(label, tokens, before, after, text)
