"""Chained hashes of full KV blocks, the prefix cache's keys.

A block's hash covers its parent's hash and its own token ids, so equal hashes mean equal
whole prefixes, not just equal blocks. Hits are still confirmed against the stored tokens
(see BlockPool.get_cached_block), so a collision can never serve the wrong KV.
"""

from __future__ import annotations

import hashlib
from array import array

BlockHash = bytes

NONE_HASH: BlockHash = b"\x00" * 32  # parent of the first block


def hash_block_tokens(parent: BlockHash | None, token_ids: list[int] | tuple[int, ...]) -> BlockHash:
    digest = hashlib.sha256(parent or NONE_HASH)
    digest.update(array("q", token_ids).tobytes())
    return digest.digest()


def extend_block_hashes(hashes: list[BlockHash], token_ids: list[int], block_size: int) -> None:
    """Append the hashes of blocks that became full since the last call (incremental)."""
    num_full = len(token_ids) // block_size
    for i in range(len(hashes), num_full):
        parent = hashes[-1] if hashes else None
        hashes.append(hash_block_tokens(parent, token_ids[i * block_size : (i + 1) * block_size]))
