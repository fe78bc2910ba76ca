"""Engine statistics, updated once per step (what `--json` prints and /metrics reads)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reference_engine.kv_manager import KVCacheManager
    from reference_engine.scheduler import Scheduler
    from reference_engine.scheduler_output import SchedulerOutput


@dataclass(slots=True)
class EngineStats:
    num_blocks: int
    block_size: int
    steps: int = 0
    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0
    peak_kv_usage: float = 0.0
    num_preemptions: int = 0
    prefix_cache_queries: int = 0  # tokens, first admissions only
    prefix_cache_hits: int = 0
    preempted_prefix_cache_queries: int = 0  # tokens looked up again by resumed requests
    preempted_prefix_cache_hits: int = 0
    last_step_tokens: int = 0
    scheduled_tokens: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    aborted: int = 0
    # --kv-cache-metrics observations (kind, seconds) not yet taken by the metrics reader
    kv_residency: list[tuple[str, float]] = field(default_factory=list)

    def record_schedule(self, out: SchedulerOutput, scheduler: Scheduler, kv: KVCacheManager) -> None:
        self.steps += not out.is_empty
        self.num_running = len(scheduler.running)
        self.num_waiting = len(scheduler.waiting)
        self.kv_usage = kv.pool.usage()
        self.peak_kv_usage = max(self.peak_kv_usage, self.kv_usage)
        self.num_preemptions = scheduler.num_preemptions
        ps = kv.prefix_stats
        self.prefix_cache_queries, self.prefix_cache_hits = ps.queries, ps.hits
        self.preempted_prefix_cache_queries, self.preempted_prefix_cache_hits = (
            ps.preempted_queries,
            ps.preempted_hits,
        )
        self.last_step_tokens = out.num_batched_tokens
        self.scheduled_tokens += out.num_batched_tokens
        if kv.pool.residency is not None:
            self.kv_residency += kv.pool.residency.take()

    def take_residency(self) -> list[tuple[str, float]]:
        """The residency observations since the last call (their one reader is /metrics)."""
        out, self.kv_residency = self.kv_residency, []
        return out

    def as_dict(self) -> dict:
        """The counters and gauges (the pending residency observations are not statistics)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "kv_residency"}
