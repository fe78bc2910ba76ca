"""The `kvscope_kv_*` families of the block-level view (exporter/METRICS.md, "KV events").

Reads the hub's last tick and its sources' counters at collection time; owns nothing.
Every problem reason is present from the start (at 0), like the scrape errors, so an alert
on `increase(...[5m]) > 0` works from the first scrape.

Table-driven, as `exporter.collector` is: each family is named once, with the value it reads
off one row (a source, a tier, a point of the miss-ratio curve, a hot chain); a value of None
exports no sample. The tables' order is the exposition's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True, slots=True)
class Family:
    """One exported family: its name, type and help, and the field it reads off a row."""

    name: str
    kind: type[CounterMetricFamily] | type[GaugeMetricFamily]
    field: str
    help: str

    def empty(self, labels: list[str]) -> Metric:
        return self.kind(self.name, self.help, labels=labels)


def counter(name: str, field: str, help: str) -> Family:
    return Family(name, CounterMetricFamily, field, help)


def gauge(name: str, field: str, help: str) -> Family:
    return Family(name, GaugeMetricFamily, field, help)


# Per source (a dict of `KvEventsHub.sources_view`), labelled by target.
SOURCE = (
    gauge(
        "kvscope_kv_events_connected",
        "connected",
        "1 while the subscriber has a connection to the publisher.",
    ),
    counter("kvscope_kv_events_batches", "batches", "KV event batches applied, live and replayed."),
    counter(
        "kvscope_kv_events_replayed_batches", "replayed_batches", "Batches recovered by a replay request."
    ),
)
# Per source and reason: the source's problem counts, and its disconnects.
PROBLEMS = counter("kvscope_kv_events_problems", "problems", "KV event stream problems, by reason.")

# Per tier (TierView), labelled by TIER_LABELS.
TIER = (
    counter("kvscope_kv_blocks_stored", "stored_blocks", "Blocks stored (BlockStored), duplicates included."),
    counter("kvscope_kv_blocks_removed", "removed_blocks", "Cached blocks removed (BlockRemoved)."),
    counter(
        "kvscope_kv_first_stores", "first_stores", "Blocks stored that were not evicted before (compulsory)."
    ),
    counter("kvscope_kv_capacity_misses", "capacity_misses", "Blocks stored again after they were evicted."),
    counter(
        "kvscope_kv_duplicate_stores",
        "duplicate_stores",
        "Stores of a block already cached (computed twice).",
    ),
    gauge(
        "kvscope_kv_cached_blocks",
        "cached_blocks",
        "Blocks cached now (stored and not removed), free ones included.",
    ),
    gauge(
        "kvscope_kv_blocks_stored_per_second",
        "stored_per_second",
        "Blocks stored per second over the window.",
    ),
    gauge(
        "kvscope_kv_blocks_removed_per_second",
        "removed_per_second",
        "Blocks removed per second over the window.",
    ),
    gauge(
        "kvscope_kv_capacity_misses_per_second",
        "capacity_misses_per_second",
        "Capacity misses per second over the window.",
    ),
)
# Per tier, its `distances`.
DISTANCE = (
    "kvscope_kv_capacity_miss_distance_blocks",
    "Evictions between a block's eviction and its return (its reuse distance), per capacity miss.",
)

# Per point (CurvePoint) of a primary tier's miss-ratio curve, labelled by instance and pool_increase.
CURVE = (
    gauge(
        "kvscope_prefix_cache_hit_ratio_projected",
        "hit_ratio",
        "Prefix-cache hit ratio over the window with a pool pool_increase larger (miss-ratio curve).",
    ),
    gauge("kvscope_kv_pool_extra_blocks", "extra_blocks", "Blocks the pool_increase adds to the pool."),
    counter(
        "kvscope_kv_avoidable_misses", "avoidable_blocks", "Capacity misses the larger pool would have hit."
    ),
    gauge(
        "kvscope_prefill_tokens_saved_per_second",
        "saved_prefill_tokens_per_second",
        "Prompt tokens per second the larger pool would not have computed, over the window.",
    ),
)
CURVE_LABELS = [*INSTANCE_LABELS, "pool_increase"]

# Per hot chain (HotChain) of a primary tier, labelled by instance and rank (1: the hottest).
CHAIN = (
    gauge("kvscope_kv_hot_prefix_reuse", "reuse", "Continuations stored under the rank-th hottest prefix."),
    gauge(
        "kvscope_kv_hot_prefix_depth_blocks",
        "depth_blocks",
        "Length in blocks of the rank-th hottest prefix.",
    ),
)
CHAIN_LABELS = [*INSTANCE_LABELS, "rank"]

# Per primary tier, labelled by instance; and once, from the hub, for the fleet.
SHARED = gauge(
    "kvscope_kv_blocks_on_other_replicas",
    "shared_blocks",
    "This instance's cached blocks that another replica also caches.",
)
FLEET = gauge(
    "kvscope_kv_blocks_shared_by_replicas",
    "fleet_shared_blocks",
    "Distinct blocks cached on two or more replicas.",
)


def _increase_label(f: float) -> str:
    return f"{f:g}"


def _distance_buckets(h: DistanceHistogram) -> list[tuple[str, float]]:
    out = [(f"{b:g}", h.count_below(b + 1)) for b in DISTANCE_BUCKETS]
    return out + [("+Inf", float(h.total))]


class _Table:
    """A table's families, empty, filled a row at a time; `read(row, field)` gets a value."""

    def __init__(
        self, families: Iterable[Family], labels: list[str], read: Callable[[Any, str], Any] = getattr
    ) -> None:
        self.metrics = [(f, f.empty(labels)) for f in families]
        self.read = read

    def add(self, labels: list[str], row: Any) -> None:
        for family, metric in self.metrics:
            value = self.read(row, family.field)
            if value is not None:
                metric.add_metric(labels, float(value))

    def __iter__(self) -> Iterator[Metric]:
        return (metric for _, metric in self.metrics)


class KvEventsCollector(Collector):
    def __init__(self, hub: KvEventsHub) -> None:
        self.hub = hub

    def collect(self) -> Iterator[Metric]:
        yield from self._sources()
        yield from self._tiers(self.hub.views)

    def _sources(self) -> Iterator[Metric]:
        sources = _Table(SOURCE, ["target"], read=dict.get)
        problems = PROBLEMS.empty(["target", "reason"])
        for view in self.hub.sources_view():
            name = view["name"]
            sources.add([name], view)
            counts = {**view[PROBLEMS.field], "disconnect": view["disconnects"]}
            for reason in PROBLEM_REASONS:
                problems.add_metric([name, reason], counts.get(reason, 0))
        yield from sources
        yield problems

    def _tiers(self, views: list[TierView]) -> Iterator[Metric]:
        tiers = _Table(TIER, TIER_LABELS)
        distance = HistogramMetricFamily(*DISTANCE, labels=TIER_LABELS)
        curve = _Table(CURVE, CURVE_LABELS)
        chains = _Table(CHAIN, CHAIN_LABELS)
        shared = _Table((SHARED,), INSTANCE_LABELS)
        fleet = _Table((FLEET,), [])
        for v in views:
            lv = [v.target, v.instance, v.medium]
            tiers.add(lv, v)
            h = DistanceHistogram.from_dict(v.distances)
            distance.add_metric(lv, _distance_buckets(h), float(h.sum))
            if v.medium != PRIMARY:
                continue
            li = [v.target, v.instance]
            for p in v.curve:
                curve.add([*li, _increase_label(p.increase)], p)
            for rank, c in enumerate(v.hot_chains, start=1):
                chains.add([*li, str(rank)], c)
            shared.add(li, v)
        if views:
            fleet.add([], self.hub)
        yield from tiers
        yield distance
        yield from (*curve, *chains, *shared, *fleet)
