"""The overview dashboard's block-level rows: KV cache events (`kvscope exporter --kv-events`)
and vLLM's sampled block residency (`--kv-cache-metrics`).

The kvscope_kv_* series carry `target` and `instance` (the engine's data-parallel rank), not
`model`: the events do not name it. Their panels are therefore scoped by target and
instance only; the residency histograms are canonical per-instance quantities and use the
dashboard's full selector. Without --kv-events these panels show "No data".
"""

from __future__ import annotations

from dashboards.layout import Layout, add_quantile_panels
from dashboards.panels import PER_S, TOKENS_PER_S, query, table, timeseries
from dashboards.promql import Promql

KV = Promql('target=~"$target", instance=~"$instance"', by="target, instance")
KV_LEGEND = "{{target}} {{instance}}"
NO_EVENTS = "No KV events: run the exporter with --kv-events"


def kv_events(layout: Layout) -> None:
    layout.row("KV cache events (block level)")
    tiers = Promql(KV.selector, by="target, instance, medium")
    layout.add(
        timeseries(
            "Blocks stored and removed per second",
            "Blocks the engine cached (BlockStored) and evicted for reuse (BlockRemoved), per "
            "instance and medium. Removals near stores mean the pool is full of cached blocks and "
            "every new block evicts one.\n\nMetrics: `kvscope_kv_blocks_stored_total`, "
            "`kvscope_kv_blocks_removed_total`",
            [
                query(tiers.sum_rate("kvscope_kv_blocks_stored_total"), "stored · {{target}} {{medium}}"),
                query(tiers.sum_rate("kvscope_kv_blocks_removed_total"), "removed · {{target}} {{medium}}"),
            ],
            unit=PER_S,
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Capacity misses per second",
            "Blocks stored again after they were evicted: prefill the engine computed twice for "
            "lack of room. First stores (never seen before) are the unavoidable part.\n\n"
            "Metrics: `kvscope_kv_capacity_misses_total`, `kvscope_kv_first_stores_total`",
            [
                query(KV.sum_rate("kvscope_kv_capacity_misses_total"), f"capacity miss · {KV_LEGEND}"),
                query(KV.sum_rate("kvscope_kv_first_stores_total"), f"first store · {KV_LEGEND}"),
            ],
            unit=PER_S,
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Cached blocks",
            "Blocks cached now (stored, not yet evicted), free ones included: what the prefix "
            "cache can hit.\n\nMetric: `kvscope_kv_cached_blocks`",
            [query(tiers.gauge("max", "kvscope_kv_cached_blocks"), "{{target}} {{instance}} {{medium}}")],
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Projected prefix hit ratio with more blocks",
            "The miss-ratio curve: the hit ratio over the exporter's window had the pool been "
            "25 / 50 / 100 / 200 % larger, from the reuse distances of capacity misses (docs/kv-events.md), "
            "next to the hit ratio the engine had.\n\nMetrics: "
            "`kvscope_prefix_cache_hit_ratio_projected`, `kvscope_prefix_cache_hit_ratio`",
            [
                query(
                    KV.gauge(
                        "max",
                        "kvscope_prefix_cache_hit_ratio_projected",
                        by="target, instance, pool_increase",
                    ),
                    "+{{pool_increase}}x · " + KV_LEGEND,
                ),
                query(KV.gauge("max", "kvscope_prefix_cache_hit_ratio"), f"as run · {KV_LEGEND}"),
            ],
            unit="percentunit",
            max_value=1,
        ),
        w=12,
    )
    layout.add(
        timeseries(
            "Prefill tokens saved per second with more blocks",
            "Prompt tokens per second a larger pool would not have computed (capacity misses it would "
            "have hit x block size), with the blocks each increase adds.\n\nMetrics: "
            "`kvscope_prefill_tokens_saved_per_second`, `kvscope_kv_pool_extra_blocks`",
            [
                query(
                    KV.gauge(
                        "max", "kvscope_prefill_tokens_saved_per_second", by="target, instance, pool_increase"
                    ),
                    "+{{pool_increase}}x · " + KV_LEGEND,
                )
            ],
            unit=TOKENS_PER_S,
        ),
        w=12,
    )
    layout.add(
        timeseries(
            "Reuse distance of capacity misses",
            "Evictions between a block's eviction and its return: a pool larger by about that many "
            "blocks would have kept it. p50 and p90.\n\nMetric: "
            "`kvscope_kv_capacity_miss_distance_blocks`",
            [
                query(
                    KV.quantile(q, "kvscope_kv_capacity_miss_distance_blocks"),
                    f"p{round(q * 100)} · {KV_LEGEND}",
                )
                for q in (0.5, 0.9)
            ],
        ),
        w=8,
    )
    layout.add(
        table(
            "Hot prefix chains",
            "The most reused cached prefixes: rank, how many requests stored a continuation after "
            "them (reuse) and their length in blocks (depth). A deep chain reused by many requests "
            "is a shared system prompt.\n\nMetrics: `kvscope_kv_hot_prefix_reuse`, "
            "`kvscope_kv_hot_prefix_depth_blocks`",
            [
                query(KV.gauge("max", m, by="target, instance, rank"), instant=True, fmt="table")
                for m in ("kvscope_kv_hot_prefix_reuse", "kvscope_kv_hot_prefix_depth_blocks")
            ],
            transformations=[{"id": "merge", "options": {}}],
            rename={"Value #A": "reuse", "Value #B": "depth (blocks)"},
            no_value=NO_EVENTS,
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Blocks cached on other replicas",
            "This instance's cached blocks that another subscribed replica caches too: prefill "
            "computed on several replicas, which prefix-aware routing would compute once.\n\n"
            "Metric: `kvscope_kv_blocks_on_other_replicas`",
            [query(KV.gauge("max", "kvscope_kv_blocks_on_other_replicas"), KV_LEGEND)],
        ),
        w=8,
    )
    target_only = Promql('target=~"$target"', by="target, reason")
    layout.add(
        timeseries(
            "KV event stream problems per second",
            "Frames the subscriber could not use, by reason: gap (then replayed), lost (not "
            "recoverable), restart (the publisher started again), truncated, malformed, "
            "unknown_event, replay_timeout, disconnect.\n\nMetric: `kvscope_kv_events_problems_total`",
            [query(target_only.sum_rate("kvscope_kv_events_problems_total"), "{{target}} {{reason}}")],
            unit=PER_S,
        ),
        w=12,
    )
    layout.add(
        timeseries(
            "KV event batches per second",
            "Batches applied (one per engine step that changed the cache), and those recovered by "
            "replay.\n\nMetrics: `kvscope_kv_events_batches_total`, "
            "`kvscope_kv_events_replayed_batches_total`",
            [
                query(
                    Promql('target=~"$target"', by="target").sum_rate("kvscope_kv_events_batches_total"),
                    "applied · {{target}}",
                ),
                query(
                    Promql('target=~"$target"', by="target").sum_rate(
                        "kvscope_kv_events_replayed_batches_total"
                    ),
                    "replayed · {{target}}",
                ),
            ],
            unit=PER_S,
        ),
        w=12,
    )


def block_residency(layout: Layout, q: Promql) -> None:
    layout.row("KV block residency (vLLM --kv-cache-metrics)")
    histograms = (
        (
            "Block lifetime",
            "kvscope_kv_block_lifetime_seconds",
            "A sampled block's allocation to its eviction.",
        ),
        (
            "Idle before eviction",
            "kvscope_kv_block_idle_before_evict_seconds",
            "A sampled block's last access (prefix hit) to its eviction: short means blocks are "
            "evicted while still warm.",
        ),
        (
            "Reuse gap",
            "kvscope_kv_block_reuse_gap_seconds",
            "Time between consecutive prefix hits on a sampled block.",
        ),
    )
    add_quantile_panels(layout, q, histograms, w=8)
