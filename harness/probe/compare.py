"""The measured pool against what the server states: one finding that says whether they
agree and, where they differ by the null block, why."""

from __future__ import annotations

from harness.bundle.finding import Finding
from harness.probe.fit import PoolFit
from harness.probe.stated import StatedPool


def _tokens(x: float) -> str:
    return f"{x:,.0f}" if abs(x - round(x)) < 1e-6 else f"{x:,.1f}"


def compare(fit: PoolFit, stated: StatedPool) -> Finding | None:
    """None when there is no measured capacity to compare."""
    measured, said = fit.capacity_tokens, stated.capacity_tokens
    if measured is None:
        return None
    if not said:
        return Finding(
            "no_stated_capacity", "the server states no pool size: the measured capacity stands alone"
        )
    blocks, size = fit.usable_blocks, fit.tokens_per_block or stated.block_size
    if abs(measured - said) < 0.5:
        return Finding(
            "capacity_matches_statement",
            f"the pool holds {_tokens(measured)} tokens for requests, as stated ({stated.capacity_source})",
        )
    if blocks and size and stated.num_blocks == blocks + 1 and stated.block_size == size:
        return Finding(
            "null_block",
            f"the pool holds {blocks:,} x {size:.0f} = {_tokens(measured)} tokens for requests, one block "
            f"({size:.0f} tokens) less than the stated {stated.num_blocks:,} x {stated.block_size} = "
            f"{_tokens(said)}: block 0 is the null block, which pads block tables and is never given "
            "to a request",
        )
    return Finding(
        "capacity_differs_from_statement",
        f"the pool holds {_tokens(measured)} tokens for requests, x{measured / said:.3f} the stated "
        f"{_tokens(said)} ({stated.capacity_source})",
    )
