"""Canonical `kvscope_*` families for prometheus_client (a custom Collector).

Reads the Exporter's state at collection time; owns nothing. Per-instance series carry
`target`, `model` and `instance` labels and are emitted only while the target is up and
only for quantities the engine reports (None is omitted, never exported as 0). Counters
mirror the engine's cumulative values, so they drop when the engine restarts; PromQL's
`rate()`/`increase()` handle that. Names and meanings: exporter/METRICS.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from exporter.diagnosis import ACTIONS
from exporter.dialects.sample import HistogramSample
from exporter.runner import Exporter

INSTANCE_LABELS = ["target", "model", "instance"]

GAUGES: dict[str, tuple[str, str]] = {
    "kv_usage_ratio": (
        "kvscope_kv_usage_ratio",
        "Fraction 0-1 of the KV cache in use (engine's own measure).",
    ),
    "kv_capacity_blocks": ("kvscope_kv_capacity_blocks", "KV cache capacity in blocks."),
    "kv_block_size_tokens": ("kvscope_kv_block_size_tokens", "Tokens per KV cache block."),
    "kv_capacity_tokens": ("kvscope_kv_capacity_tokens", "KV cache capacity in tokens."),
    "requests_running": ("kvscope_requests_running", "Requests in the running batch."),
    "requests_waiting": ("kvscope_requests_waiting", "Requests waiting to be scheduled."),
}
COUNTERS: dict[str, tuple[str, str]] = {
    "prefix_cache_queries_tokens": (
        "kvscope_prefix_cache_queries_tokens",
        "Prompt tokens looked up in the prefix cache (engine cumulative).",
    ),
    "prefix_cache_hits_tokens": (
        "kvscope_prefix_cache_hits_tokens",
        "Prompt tokens served from the prefix cache (engine cumulative).",
    ),
    "preemptions": ("kvscope_preemptions", "Preemption (SGLang: retraction) events (engine cumulative)."),
    "requests_finished": ("kvscope_requests_finished", "Finished requests (engine cumulative)."),
    "prompt_tokens": ("kvscope_prompt_tokens", "Prompt tokens processed (engine cumulative)."),
    "generation_tokens": ("kvscope_generation_tokens", "Generated tokens (engine cumulative)."),
}
HISTOGRAMS: dict[str, tuple[str, str]] = {
    "time_to_first_token_seconds": (
        "kvscope_time_to_first_token_seconds",
        "Time to first token, with the engine's buckets.",
    ),
    "inter_token_latency_seconds": (
        "kvscope_inter_token_latency_seconds",
        "Inter-token latency (TPOT where the engine only has that), engine buckets.",
    ),
    "e2e_request_latency_seconds": (
        "kvscope_e2e_request_latency_seconds",
        "End-to-end request latency, with the engine's buckets.",
    ),
    "request_queue_time_seconds": (
        "kvscope_request_queue_time_seconds",
        "Time requests spent waiting in the queue, with the engine's buckets.",
    ),
}


def _buckets(h: HistogramSample) -> list[tuple[str, float]]:
    return [(floatToGoString(b), c) for b, c in zip(h.bounds, h.counts)]


class KvscopeCollector(Collector):
    """Collector over one Exporter; register it in the app's own CollectorRegistry."""

    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter

    def collect(self) -> Iterator[Metric]:
        states = self.exporter.states
        up = GaugeMetricFamily(
            "kvscope_target_up", "1 if the last scrape of the target succeeded.", labels=["target"]
        )
        dur = GaugeMetricFamily(
            "kvscope_scrape_duration_seconds", "Duration of the last scrape of the target.", labels=["target"]
        )
        errs = CounterMetricFamily(
            "kvscope_scrape_errors", "Scrapes that hit a problem, by reason.", labels=["target", "reason"]
        )
        for st in states:
            up.add_metric([st.target.name], 1.0 if st.up else 0.0)
            if st.last_duration is not None:
                dur.add_metric([st.target.name], st.last_duration)
            for reason, n in sorted(st.errors.items()):
                errs.add_metric([st.target.name, reason], n)
        yield up
        yield dur
        yield errs

        gauges = {q: GaugeMetricFamily(n, d, labels=INSTANCE_LABELS) for q, (n, d) in GAUGES.items()}
        counters = {q: CounterMetricFamily(n, d, labels=INSTANCE_LABELS) for q, (n, d) in COUNTERS.items()}
        hists = {q: HistogramMetricFamily(n, d, labels=INSTANCE_LABELS) for q, (n, d) in HISTOGRAMS.items()}
        ratio = GaugeMetricFamily(
            "kvscope_prefix_cache_hit_ratio",
            "Prefix-cache hits / queries (tokens) over the exporter's window.",
            labels=INSTANCE_LABELS,
        )
        prate = GaugeMetricFamily(
            "kvscope_preemptions_per_second",
            "Preemptions per second over the exporter's window.",
            labels=INSTANCE_LABELS,
        )
        advice = GaugeMetricFamily(
            "kvscope_advice",
            "1 when the live rules currently advise the action.",
            labels=INSTANCE_LABELS + ["action"],
        )
        for st in states:
            latest = st.series.latest()
            if not st.up or latest is None:
                continue
            for key, s in latest.instances.items():
                lv = [st.target.name, s.model, s.instance]
                for q, fam in gauges.items():
                    v = getattr(s, q)
                    if v is not None and math.isfinite(v):
                        fam.add_metric(lv, v)
                for q, fam in counters.items():
                    v = getattr(s, q)
                    if v is not None and math.isfinite(v):
                        fam.add_metric(lv, v)
                for q, fam in hists.items():
                    h = s.histograms.get(q)
                    if h is not None:
                        fam.add_metric(
                            lv, _buckets(h), h.sum if h.sum is not None and math.isfinite(h.sum) else None
                        )
                d = st.derived.get(key)
                if d is None:
                    continue
                if d.hit_ratio is not None:
                    ratio.add_metric(lv, d.hit_ratio)
                if d.preemption_rate is not None:
                    prate.add_metric(lv, d.preemption_rate)
                for action in ACTIONS:
                    advice.add_metric(lv + [action], 1.0 if d.diagnosis.advice.get(action) else 0.0)
        yield from gauges.values()
        yield ratio
        yield prate
        yield from counters.values()
        yield from hists.values()
        yield advice


def make_registry(exporter: Exporter) -> CollectorRegistry:
    """A private registry holding only the kvscope collector (never the global REGISTRY)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KvscopeCollector(exporter))
    return registry
