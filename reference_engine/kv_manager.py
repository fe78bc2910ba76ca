"""Per-request block tables on top of the block pool: prefix lookup, slot allocation,
copy-on-write, fork and free.

Block layout of one request (block_size 4, 10 tokens, 6 computed, 3 new this step):

    | b0: t0..t3 | b1: t4..t7 | b2: t8 t9 . . |
      computed     t4 t5 computed, t6 t7 t8 new; t9 sampled later

`allocate_slots` grows the table to cover `num_computed_tokens + num_new_tokens` and
returns None, changing nothing, when the pool cannot cover it: the scheduler then preempts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reference_engine.block_hash import extend_block_hashes
from reference_engine.block_pool import BlockPool
from reference_engine.free_block_queue import KVBlock
from reference_engine.kv_residency import KVResidencyTracker
from reference_engine.request import Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(slots=True)
class PrefixCacheStats:
    """Counted in tokens, like vLLM. Lookups by preempted requests that resume are counted
    apart: their hits are their own recomputed blocks and would inflate the hit rate."""

    queries: int = 0
    hits: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0

    def record(self, num_tokens: int, num_hits: int, preempted: bool) -> None:
        if preempted:
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
        else:
            self.queries += num_tokens
            self.hits += num_hits


class KVCacheManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_caching: bool = True,
        reservation: Callable[[Request], int] | None = None,
        watermark_blocks: int = 0,
        enable_kv_events: bool = False,
        residency: KVResidencyTracker | None = None,
    ):
        """`reservation` set: contiguous mode, each request reserves that many tokens'
        blocks at admission (the pre-paging baseline) and never grows afterwards.
        `enable_kv_events` / `residency`: see BlockPool."""
        self.block_size = block_size
        self.pool = BlockPool(num_blocks, enable_caching, block_size, enable_kv_events, residency)
        self.enable_caching = enable_caching
        self.reservation = reservation
        self.watermark_blocks = watermark_blocks
        self.req_blocks: dict[str, list[KVBlock]] = {}
        # The same tables as block ids, kept in step so a decode step builds no lists.
        self.req_block_ids: dict[str, list[int]] = {}
        self.prefix_stats = PrefixCacheStats()
        self.pending_copies: list[tuple[int, int]] = []

    @property
    def usable_blocks(self) -> int:
        return self.pool.num_blocks - 1

    def block_ids(self, request_id: str) -> list[int]:
        return list(self.req_block_ids.get(request_id, ()))

    def get_computed_blocks(self, request: Request) -> list[KVBlock]:
        """Longest chain of cached full blocks that prefixes the request's tokens.

        Capped at `num_tokens - 1`: the last token is always computed, because its logits
        are what the next token is sampled from.
        """
        if not self.enable_caching or request.sampling_params.prompt_logprobs is not None:
            # Scoring a prompt needs logits at every prompt position, so nothing may be skipped.
            return []
        extend_block_hashes(request.block_hashes, request.token_ids, self.block_size)
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[KVBlock] = []
        bs = self.block_size
        for i, block_hash in enumerate(request.block_hashes[:max_blocks]):
            block = self.pool.get_cached_block(block_hash, tuple(request.token_ids[i * bs : (i + 1) * bs]))
            if block is None:
                break
            hits.append(block)
        return hits

    def _blocks_needed(self, request: Request, total_tokens: int, num_held: int) -> int:
        if self.reservation is not None:
            total_tokens = max(total_tokens, self.reservation(request))
        return max(0, cdiv(total_tokens, self.block_size) - num_held)

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        computed: list[KVBlock] | None = None,
        use_watermark: bool = False,
    ) -> list[int] | None:
        rid = request.request_id
        blocks = self.req_blocks.get(rid)
        if blocks and not computed:
            # Fast path (nearly every decode step): the write stays inside one private block
            # the request already holds.
            first = request.num_computed_tokens // self.block_size
            total = request.num_computed_tokens + num_new_tokens
            if (
                first < len(blocks)
                and total <= min(len(blocks), first + 1) * self.block_size
                and blocks[first].ref_cnt == 1
            ):
                return self.req_block_ids[rid]
        if computed:
            assert not blocks, "computed blocks only apply to a request with no blocks yet"
        computed = computed or []
        held = len(blocks) if blocks else len(computed)
        # On admission the prefix hit, not the request's reset counter, is what is computed.
        num_computed = len(computed) * self.block_size if computed else request.num_computed_tokens
        total = num_computed + num_new_tokens
        needed = self._blocks_needed(request, total, held)
        shared = self._shared_write_targets(request, blocks, total)
        revived = sum(1 for b in computed if b.ref_cnt == 0)
        reserve = self.watermark_blocks if use_watermark else 0
        if needed + len(shared) + revived + reserve > self.pool.num_free_blocks:
            return None
        if blocks is None:
            blocks = self.req_blocks[rid] = []
        if computed:
            self.pool.touch(computed)
            blocks.extend(computed)
        self._copy_on_write(request, blocks, shared)
        blocks.extend(self.pool.get_new_blocks(needed))
        ids = self.req_block_ids[rid] = [b.block_id for b in blocks]
        return ids

    def _shared_write_targets(self, request: Request, blocks: list[KVBlock] | None, total: int) -> list[int]:
        """Indices of blocks this step writes into that another table also holds (after a
        fork for parallel sampling): writing there would clobber the sibling's tokens."""
        if not blocks or total <= request.num_computed_tokens:
            return []
        first = request.num_computed_tokens // self.block_size
        last = min(len(blocks), cdiv(total, self.block_size))
        return [i for i in range(first, last) if blocks[i].ref_cnt > 1]

    def _copy_on_write(self, request: Request, blocks: list[KVBlock], indices: list[int]) -> None:
        """Give the request private copies; only a block that already holds computed
        tokens needs its contents copied (a contiguous reservation's empty tail does not)."""
        for i in indices:
            src = blocks[i]
            (dst,) = self.pool.get_new_blocks(1)
            self.pool.free_blocks([src])
            blocks[i] = dst
            if i * self.block_size < request.num_computed_tokens:
                self.pending_copies.append((src.block_id, dst.block_id))

    def take_copies(self) -> list[tuple[int, int]]:
        copies, self.pending_copies = self.pending_copies, []
        return copies

    def cache_blocks(self, request: Request) -> None:
        """Publish the request's full, computed blocks in the prefix cache."""
        if not self.enable_caching:
            return
        blocks = self.req_blocks.get(request.request_id)
        num_full = min(request.num_computed_tokens // self.block_size, len(blocks or ()))
        if num_full == 0 or blocks[num_full - 1].block_hash is not None:
            return  # no block became full since the last call
        extend_block_hashes(request.block_hashes, request.token_ids, self.block_size)
        num_full = min(num_full, len(request.block_hashes))
        if num_full == 0:
            return
        start = num_full - 1
        while start > 0 and blocks[start - 1].block_hash is None:
            start -= 1  # everything before the first uncached block was cached earlier
        bs, hashes = self.block_size, request.block_hashes
        self.pool.cache_full_blocks(
            blocks[start:num_full],
            hashes[start:num_full],
            [tuple(request.token_ids[i * bs : (i + 1) * bs]) for i in range(start, num_full)],
            hashes[start - 1] if start else None,
        )

    def fork(self, parent: Request, child: Request) -> None:
        """The child shares every block of the parent (parallel sampling, n > 1)."""
        blocks = list(self.req_blocks[parent.request_id])
        self.pool.touch(blocks)
        self.req_blocks[child.request_id] = blocks
        self.req_block_ids[child.request_id] = list(self.req_block_ids[parent.request_id])

    def free(self, request: Request) -> None:
        """Release in reverse order so the tail of a chain is evicted before its head."""
        blocks = self.req_blocks.pop(request.request_id, None)
        self.req_block_ids.pop(request.request_id, None)
        if blocks:
            self.pool.free_blocks(list(reversed(blocks)))
