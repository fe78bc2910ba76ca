"""The canonical quantities: what every dialect fills, what samples, series and records hold.

One table (`ALL`) names each quantity once, with its kind, the HELP of the `kvscope_<name>`
family it is re-exported as, and how the instances of one model combine into an aggregate.
Everything else (`QUANTITIES`, `COUNTERS`, the collector's families, the aggregate's rules,
the harness's server columns) is derived from it. Meanings: exporter/METRICS.md; how each
engine's names map onto them: docs/reference/metric-dialects.md.

`Key` is an engine instance within one target: (model, instance).

Stdlib only: the harness and the slim sidecar both import it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Key = tuple[str, str]  # (model, instance)

Kind = Literal["gauge", "counter", "histogram"]
# How one model's instances combine (dialects/aggregate.py): summed; kept only when every
# instance agrees; KV usage's capacity-weighted mean.
Combine = Literal["sum", "common", "usage"]
METRIC_PREFIX = "kvscope_"


@dataclass(frozen=True, slots=True)
class Quantity:
    """`low`..`high` (inclusive) is every value the quantity can take; anything outside is
    impossible and dropped by `dialects.sanity` (histograms: counts and sums are never
    negative, buckets never decrease)."""

    name: str
    kind: Kind
    help: str
    combine: Combine = "sum"
    low: float = 0.0
    high: float = math.inf

    @property
    def metric(self) -> str:
        """The re-exported family's name."""
        return METRIC_PREFIX + self.name


# Scalars in the order `inspect` prints them, then the latency histograms and vLLM's sampled
# block-residency histograms (`--kv-cache-metrics`), with the engine's buckets.
ALL: tuple[Quantity, ...] = (
    Quantity(
        "kv_usage_ratio",
        "gauge",
        "Fraction 0-1 of the KV cache in use (engine's own measure).",
        "usage",
        high=1.0,
    ),
    Quantity("kv_capacity_blocks", "gauge", "KV cache capacity in blocks.", low=1.0),
    Quantity("kv_block_size_tokens", "gauge", "Tokens per KV cache block.", "common", low=1.0),
    Quantity("kv_capacity_tokens", "gauge", "KV cache capacity in tokens.", low=1.0),
    Quantity(
        "prefix_cache_queries_tokens",
        "counter",
        "Prompt tokens looked up in the prefix cache (engine cumulative).",
    ),
    Quantity(
        "prefix_cache_hits_tokens",
        "counter",
        "Prompt tokens served from the prefix cache (engine cumulative).",
    ),
    Quantity("preemptions", "counter", "Preemption (SGLang: retraction) events (engine cumulative)."),
    Quantity("requests_running", "gauge", "Requests in the running batch."),
    Quantity("requests_waiting", "gauge", "Requests waiting to be scheduled."),
    Quantity("prompt_tokens", "counter", "Prompt tokens processed (engine cumulative)."),
    Quantity("generation_tokens", "counter", "Generated tokens (engine cumulative)."),
    Quantity("requests_finished", "counter", "Finished requests (engine cumulative)."),
    Quantity("time_to_first_token_seconds", "histogram", "Time to first token, with the engine's buckets."),
    Quantity(
        "inter_token_latency_seconds",
        "histogram",
        "Inter-token latency (TPOT where the engine only has that), engine buckets.",
    ),
    Quantity(
        "e2e_request_latency_seconds", "histogram", "End-to-end request latency, with the engine's buckets."
    ),
    Quantity(
        "request_queue_time_seconds",
        "histogram",
        "Time requests spent waiting in the queue, with the engine's buckets.",
    ),
    Quantity(
        "kv_block_lifetime_seconds",
        "histogram",
        "Sampled KV blocks' time from allocation to eviction (vLLM --kv-cache-metrics), engine buckets.",
    ),
    Quantity(
        "kv_block_idle_before_evict_seconds",
        "histogram",
        "Sampled KV blocks' time from last access to eviction (vLLM --kv-cache-metrics), engine buckets.",
    ),
    Quantity(
        "kv_block_reuse_gap_seconds",
        "histogram",
        "Gaps between accesses of sampled KV blocks (vLLM --kv-cache-metrics), engine buckets.",
    ),
)

QUANTITIES: tuple[str, ...] = tuple(q.name for q in ALL if q.kind != "histogram")
COUNTERS: tuple[str, ...] = tuple(q.name for q in ALL if q.kind == "counter")
HISTOGRAMS: tuple[str, ...] = tuple(q.name for q in ALL if q.kind == "histogram")
# What the engine states about its configuration (config-info labels), per instance; strings
# or numbers, never re-exported as metrics. They combine like "common" quantities.
FACTS: tuple[str, ...] = (
    "kv_cache_dtype",
    "gpu_memory_utilization",
    "prefix_cache_unit",
    "enable_prefix_caching",
)
