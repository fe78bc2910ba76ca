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
from exporter.quantities import ALL, Kind
from exporter.runner import Exporter

INSTANCE_LABELS = ["target", "model", "instance"]


def _families(kind: Kind, family: type[Metric]) -> dict[str, Metric]:
    """One empty per-instance family per canonical quantity of `kind`, by quantity name."""
    return {q.name: family(q.metric, q.help, labels=INSTANCE_LABELS) for q in ALL if q.kind == kind}


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

        gauges = _families("gauge", GaugeMetricFamily)
        counters = _families("counter", CounterMetricFamily)
        hists = _families("histogram", HistogramMetricFamily)
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
