"""Hot prefix chains of one instance, and blocks cached on more than one replica.

A chain is the path from a sequence's first block to a block P; its `reuse` is the number of
BlockStored events whose parent was P: requests that found the prefix up to P cached and
added their own continuation (a request that stores a whole chain at once, or decodes block
after block, gives each block a reuse of at most 1, so MIN_REUSE keeps those out). Depth is
the chain's length in blocks (a lower bound when the subscriber joined after the chain's
start was stored).

Across replicas: the primary tiers' keys are intersected; a block cached on two replicas of
one model is prefill computed twice, which prefix-aware routing (llm-d, Dynamo, AIBrix)
would compute once. Hashes only match across replicas that hash alike (vLLM's default
sha256 chain does; Python's `hash` with a random PYTHONHASHSEED does not).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exporter.kv_events.blocks import Tier

MIN_REUSE = 2
TOP_CHAINS = 5


def key_text(key: Any) -> str:
    """A block key as text: 16 hex digits for a 64-bit hash, `group:hash` for other groups."""
    if isinstance(key, tuple):
        return f"{key[0]}:{key_text(key[1])}"
    if isinstance(key, bytes):
        return key.hex()
    return f"{key & 0xFFFFFFFFFFFFFFFF:016x}"


@dataclass(frozen=True, slots=True)
class HotChain:
    block: str  # the chain's last block (the shared prefix ends there)
    depth_blocks: int
    reuse: int
    depth_tokens: int

    def to_dict(self) -> dict:
        return {
            "block": self.block,
            "depth_blocks": self.depth_blocks,
            "depth_tokens": self.depth_tokens,
            "reuse": self.reuse,
        }


def hot_chains(tier: Tier, n: int = TOP_CHAINS) -> list[HotChain]:
    top = heapq.nlargest(
        n,
        ((e.reuse, e.depth, k) for k, e in tier.reused.items() if e.reuse >= MIN_REUSE),
        key=lambda t: (t[0], t[1]),
    )
    return [HotChain(key_text(k), depth, reuse, depth * tier.block_size) for reuse, depth, k in top]


def shared_blocks(replicas: Mapping[Any, Tier]) -> tuple[dict[Any, int], int]:
    """(per replica: its cached blocks also cached on another replica, distinct blocks cached
    on two or more replicas)."""
    seen: dict[Any, int] = {}
    for tier in replicas.values():
        for key in tier.cached:
            seen[key] = seen.get(key, 0) + 1
    multi = {k for k, c in seen.items() if c > 1}
    per = {rid: sum(1 for k in tier.cached if k in multi) for rid, tier in replicas.items()}
    return per, len(multi)
