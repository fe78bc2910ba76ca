"""The `kvscope_kv_*` families of the block-level view (exporter/METRICS.md, "KV events").

Reads the hub's last tick and its sources' counters at collection time; owns nothing.
Every problem reason is present from the start (at 0), like the scrape errors, so an alert
on `increase(...[5m]) > 0` works from the first scrape.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.kv_events.blocks import PRIMARY
from exporter.kv_events.distance import DistanceHistogram
from exporter.kv_events.hub import KvEventsHub, TierView
from exporter.kv_events.source import FRAME_REASONS

PROBLEM_REASONS = (*FRAME_REASONS, "gap", "lost", "replay_timeout", "restart", "overflow", "disconnect")
TIER_LABELS = ["target", "instance", "medium"]
INSTANCE_LABELS = ["target", "instance"]
DISTANCE_BUCKETS = tuple(float(1 << k) for k in range(0, 21))  # 1 .. ~1M evictions


def _increase_label(f: float) -> str:
    return f"{f:g}"


def _distance_buckets(h: DistanceHistogram) -> list[tuple[str, float]]:
    out = [(f"{b:g}", h.count_below(b + 1)) for b in DISTANCE_BUCKETS]
    return out + [("+Inf", float(h.total))]


class KvEventsCollector(Collector):
    def __init__(self, hub: KvEventsHub) -> None:
        self.hub = hub

    def collect(self) -> Iterator[Metric]:
        yield from self._sources()
        yield from self._tiers(self.hub.views)

    def _sources(self) -> Iterator[Metric]:
        connected = GaugeMetricFamily(
            "kvscope_kv_events_connected",
            "1 while the subscriber has a connection to the publisher.",
            labels=["target"],
        )
        batches = CounterMetricFamily(
            "kvscope_kv_events_batches", "KV event batches applied, live and replayed.", labels=["target"]
        )
        replayed = CounterMetricFamily(
            "kvscope_kv_events_replayed_batches", "Batches recovered by a replay request.", labels=["target"]
        )
        problems = CounterMetricFamily(
            "kvscope_kv_events_problems", "KV event stream problems, by reason.", labels=["target", "reason"]
        )
        for view in self.hub.sources_view():
            name = view["name"]
            connected.add_metric([name], 1.0 if view["connected"] else 0.0)
            batches.add_metric([name], view["batches"])
            replayed.add_metric([name], view["replayed_batches"])
            counts = {**view["problems"], "disconnect": view["disconnects"]}
            for reason in PROBLEM_REASONS:
                problems.add_metric([name, reason], counts.get(reason, 0))
        yield from (connected, batches, replayed, problems)

    def _tiers(self, views: list[TierView]) -> Iterator[Metric]:
        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=TIER_LABELS)

        def gauge(name: str, doc: str, labels: list[str] = TIER_LABELS) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        stored = counter("kvscope_kv_blocks_stored", "Blocks stored (BlockStored), duplicates included.")
        removed = counter("kvscope_kv_blocks_removed", "Cached blocks removed (BlockRemoved).")
        first = counter("kvscope_kv_first_stores", "Blocks stored that were not evicted before (compulsory).")
        misses = counter("kvscope_kv_capacity_misses", "Blocks stored again after they were evicted.")
        dupes = counter("kvscope_kv_duplicate_stores", "Stores of a block already cached (computed twice).")
        stored_rate = gauge(
            "kvscope_kv_blocks_stored_per_second", "Blocks stored per second over the window."
        )
        removed_rate = gauge(
            "kvscope_kv_blocks_removed_per_second", "Blocks removed per second over the window."
        )
        miss_rate = gauge(
            "kvscope_kv_capacity_misses_per_second", "Capacity misses per second over the window."
        )
        cached = gauge(
            "kvscope_kv_cached_blocks", "Blocks cached now (stored and not removed), free ones included."
        )
        distance = HistogramMetricFamily(
            "kvscope_kv_capacity_miss_distance_blocks",
            "Evictions between a block's eviction and its return (its reuse distance), per capacity miss.",
            labels=TIER_LABELS,
        )
        inc = [*INSTANCE_LABELS, "pool_increase"]
        projected = gauge(
            "kvscope_prefix_cache_hit_ratio_projected",
            "Prefix-cache hit ratio over the window with a pool pool_increase larger (miss-ratio curve).",
            inc,
        )
        extra = gauge("kvscope_kv_pool_extra_blocks", "Blocks the pool_increase adds to the pool.", inc)
        avoidable = CounterMetricFamily(
            "kvscope_kv_avoidable_misses", "Capacity misses the larger pool would have hit.", labels=inc
        )
        saved = gauge(
            "kvscope_prefill_tokens_saved_per_second",
            "Prompt tokens per second the larger pool would not have computed, over the window.",
            inc,
        )
        chain = [*INSTANCE_LABELS, "rank"]
        reuse = gauge(
            "kvscope_kv_hot_prefix_reuse", "Continuations stored under the rank-th hottest prefix.", chain
        )
        depth = gauge(
            "kvscope_kv_hot_prefix_depth_blocks", "Length in blocks of the rank-th hottest prefix.", chain
        )
        shared = gauge(
            "kvscope_kv_blocks_on_other_replicas",
            "This instance's cached blocks that another replica also caches.",
            INSTANCE_LABELS,
        )
        fleet = GaugeMetricFamily(
            "kvscope_kv_blocks_shared_by_replicas", "Distinct blocks cached on two or more replicas."
        )
        for v in views:
            lv = [v.target, v.instance, v.medium]
            for fam, value in (
                (stored, v.stored_blocks),
                (removed, v.removed_blocks),
                (first, v.first_stores),
                (misses, v.capacity_misses),
                (dupes, v.duplicate_stores),
                (cached, v.cached_blocks),
                (stored_rate, v.stored_per_second),
                (removed_rate, v.removed_per_second),
                (miss_rate, v.capacity_misses_per_second),
            ):
                if value is not None:
                    fam.add_metric(lv, value)
            h = DistanceHistogram.from_dict(v.distances)
            distance.add_metric(lv, _distance_buckets(h), float(h.sum))
            if v.medium != PRIMARY:
                continue
            li = [v.target, v.instance]
            for p in v.curve:
                lp = [*li, _increase_label(p.increase)]
                extra.add_metric(lp, p.extra_blocks)
                avoidable.add_metric(lp, p.avoidable_blocks)
                if p.hit_ratio is not None:
                    projected.add_metric(lp, p.hit_ratio)
                if p.saved_prefill_tokens_per_second is not None:
                    saved.add_metric(lp, p.saved_prefill_tokens_per_second)
            for i, c in enumerate(v.hot_chains, start=1):
                reuse.add_metric([*li, str(i)], c.reuse)
                depth.add_metric([*li, str(i)], c.depth_blocks)
            if v.shared_blocks is not None:
                shared.add_metric(li, v.shared_blocks)
        if views:
            fleet.add_metric([], self.hub.fleet_shared_blocks)
        yield from (
            stored,
            removed,
            first,
            misses,
            dupes,
            cached,
            stored_rate,
            removed_rate,
            miss_rate,
            distance,
        )
        yield from (projected, extra, avoidable, saved, reuse, depth, shared, fleet)
