"""The scheduler: one token-budget rule, vLLM V1 style.

Each step tops requests up towards their known tokens within `max_num_batched_tokens`:
running requests first (decode and unfinished prefill chunks), then waiting ones.
Chunked prefill, mixed prefill/decode batches, prefix hits and recompute after
preemption all follow from that rule.

Preemption is by recompute: when the pool cannot cover a running request, the most
recently admitted running request is evicted (blocks freed, progress reset) and put at
the front of the waiting queue. A step that preempted admits nobody, so the freed blocks
go to the requests already running instead of thrashing.

Times (`first_scheduled_time`, `finished_time`) are read off the engine's clock
(`reference_engine.clock`), so a replay's stamps are virtual like its arrivals.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from reference_engine.clock import Clock
from reference_engine.kv_manager import KVCacheManager
from reference_engine.request import Request, RequestStatus
from reference_engine.scheduler_output import ScheduledChunk, SchedulerOutput


@dataclass(slots=True)
class SchedulerLimits:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int


class Scheduler:
    def __init__(self, limits: SchedulerLimits, kv: KVCacheManager, clock: Clock):
        self.limits = limits
        self.kv = kv
        self.clock = clock
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0

    def add_request(self, request: Request) -> None:
        self.waiting.append(request)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.limits.max_num_batched_tokens
        now = self.clock.now()
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            num_new = self._num_new_tokens(request, request.num_computed_tokens, budget)
            block_ids = self.kv.allocate_slots(request, num_new)
            while block_ids is None:
                victim = self.running.pop()
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is request:
                    break
                block_ids = self.kv.allocate_slots(request, num_new)
            if block_ids is None:
                break
            out.chunks.append(self._chunk(request, request.num_computed_tokens, num_new, block_ids))
            budget -= num_new
            i += 1

        # Admitting after a preemption would hand the freed blocks to newcomers and evict
        # the same requests again next step.
        while (
            not out.preempted and self.waiting and budget > 0 and len(self.running) < self.limits.max_num_seqs
        ):
            request = self.waiting[0]
            computed = self.kv.get_computed_blocks(request)
            num_computed = len(computed) * self.kv.block_size
            num_new = self._num_new_tokens(request, num_computed, budget)
            # A lone request is admitted without the watermark, so a pool that fits one
            # request can never stall.
            block_ids = self.kv.allocate_slots(request, num_new, computed, use_watermark=bool(self.running))
            if block_ids is None:
                break
            self.waiting.popleft()
            resumed = request.status == RequestStatus.PREEMPTED
            self.kv.prefix_stats.record(request.num_tokens, num_computed, preempted=resumed)
            if request.num_cached_tokens < 0:
                request.num_cached_tokens = num_computed
            if request.first_scheduled_time is None:
                request.first_scheduled_time = now
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_computed
            self.running.append(request)
            out.chunks.append(self._chunk(request, num_computed, num_new, block_ids))
            budget -= num_new
        out.block_copies = self.kv.take_copies()
        return out

    def _num_new_tokens(self, request: Request, num_computed: int, budget: int) -> int:
        return min(request.num_tokens - num_computed, budget, self.limits.max_model_len - num_computed)

    @staticmethod
    def _chunk(request: Request, start: int, num_new: int, block_ids: list[int]) -> ScheduledChunk:
        return ScheduledChunk(
            request, start, num_new, block_ids, samples=start + num_new == request.num_tokens
        )

    def _preempt(self, request: Request) -> None:
        self.kv.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, list[int]]) -> None:
        """Advance computed tokens, publish newly full blocks, append sampled tokens.

        `sampled[request_id]` holds the tokens sampled for a chunk with `samples=True`; the
        first is appended here, the rest (n > 1) are for forks made by the caller.
        """
        for chunk in out.chunks:
            request = chunk.request
            if request.is_finished:  # aborted while the step ran
                continue
            request.num_computed_tokens = chunk.end
            self.kv.cache_blocks(request)
            if chunk.samples:
                request.token_ids.append(sampled[request.request_id][0])

    def fork(self, parent: Request, child: Request) -> None:
        """Add a sibling sequence that shares the parent's blocks (parallel sampling)."""
        child.status = RequestStatus.RUNNING
        child.num_computed_tokens = parent.num_computed_tokens
        child.first_scheduled_time = parent.first_scheduled_time
        self.kv.fork(parent, child)
        self.running.append(child)

    def finish(self, request: Request, status: RequestStatus) -> None:
        """Remove a request wherever it is and free its blocks at once."""
        if request.is_finished:
            return
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        request.status = status
        request.finished_time = self.clock.now()
        self.kv.free(request)
