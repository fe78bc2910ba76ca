"""Ladder observations made from a known pool, for the fit's tests: what a paged pool of
`usable` blocks of `block` tokens with `fixed` blocks per request would show, read the way
`lone_request.observe` reads it (peak over the idle level, the staircase of levels climbed)."""

from __future__ import annotations

import math

from harness.probe.ladder import ladder
from harness.probe.observation import RequestObservation


def observed(
    usable: int,
    block: int,
    fixed: int = 0,
    max_kv: int = 1000,
    reserve: int | None = None,
    idle: float = 0.0,
) -> list[RequestObservation]:
    """One observation per rung of the ladder for `max_kv`; `reserve`: every request holds that
    many blocks whatever its length (a contiguous allocator)."""

    def blocks(t: int) -> int:
        return reserve if reserve is not None else fixed + math.ceil(t / block)

    out = []
    for r in ladder(max_kv):
        first = blocks(r.prompt_tokens)
        climbed = sorted({blocks(t) for t in range(r.prompt_tokens, r.kv_tokens + 1)} | {first})
        out.append(
            RequestObservation(
                r.prompt_tokens,
                r.output_tokens,
                r.prompt_tokens,
                r.output_tokens,
                idle_before=idle,
                idle_after=idle,
                peak_usage=blocks(r.kv_tokens) / usable,
                levels=tuple(idle + b / usable for b in climbed),
                readings=50,
                preemptions=0.0,
                max_running=1.0,
            )
        )
    return out
