"""Canonical `kvscope_*` families for prometheus_client (a custom Collector).

Reads a `snapshot` of the Exporter's state; owns nothing. The snapshot is taken on the event
loop (it copies references, O(targets + instances)) and can then be rendered on a worker
thread while the loop goes on changing the state. Per-instance series carry
`target`, `model` and `instance` labels and are emitted only while the target is up and
only for quantities the engine reports (None is omitted, never exported as 0). Counters
mirror the engine's cumulative values, so they drop when the engine restarts; PromQL's
`rate()`/`increase()` handle that. Names and meanings: exporter/METRICS.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from exporter.derived import Derived
from exporter.diagnosis import ACTIONS
from exporter.dialects.sample import EngineSample, HistogramSample
from exporter.quantities import ALL, Key, Kind
from exporter.runner import Exporter

INSTANCE_LABELS = ["target", "model", "instance"]


def _families(kind: Kind, family: type[Metric]) -> dict[str, Metric]:
    """One empty per-instance family per canonical quantity of `kind`, by quantity name."""
    return {q.name: family(q.metric, q.help, labels=INSTANCE_LABELS) for q in ALL if q.kind == kind}


def _buckets(h: HistogramSample) -> list[tuple[str, float]]:
    return [(floatToGoString(b), c) for b, c in zip(h.bounds, h.counts)]


@dataclass(frozen=True, slots=True)
class TargetView:
    """What /metrics shows of one target at one moment. `instances` pairs each sample with
    the histograms it had then (the ring buffer drops them from older points)."""

    name: str
    up: bool
    last_duration: float | None
    errors: tuple[tuple[str, int], ...]
    over_limit: bool
    instances: tuple[tuple[Key, EngineSample, dict[str, HistogramSample]], ...]
    derived: dict[Key, Derived]


def snapshot(exporter: Exporter) -> list[TargetView]:
    views = []
    for st in exporter.states:
        latest = st.series.latest()
        instances = (
            ()
            if not st.up or latest is None
            else tuple((k, s, s.histograms) for k, s in latest.instances.items())
        )
        views.append(
            TargetView(
                st.target.name,
                st.up,
                st.last_duration,
                tuple(sorted(st.errors.items())),
                st.over_limit is not None,
                instances,
                st.derived,
            )
        )
    return views


class KvscopeCollector(Collector):
    """Collector over target views (`snapshot`); register it in a private CollectorRegistry."""

    def __init__(self, views: Callable[[], list[TargetView]]) -> None:
        self.views = views

    def collect(self) -> Iterator[Metric]:
        views = self.views()
        up = GaugeMetricFamily(
            "kvscope_target_up", "1 if the last scrape of the target succeeded.", labels=["target"]
        )
        over = GaugeMetricFamily(
            "kvscope_target_over_limit",
            "1 if the target's last scrape went past --max-body, --sample-limit or --instance-limit.",
            labels=["target"],
        )
        dur = GaugeMetricFamily(
            "kvscope_scrape_duration_seconds", "Duration of the last scrape of the target.", labels=["target"]
        )
        errs = CounterMetricFamily(
            "kvscope_scrape_errors", "Scrapes that hit a problem, by reason.", labels=["target", "reason"]
        )
        for v in views:
            up.add_metric([v.name], 1.0 if v.up else 0.0)
            over.add_metric([v.name], 1.0 if v.over_limit else 0.0)
            if v.last_duration is not None:
                dur.add_metric([v.name], v.last_duration)
            for reason, n in v.errors:
                errs.add_metric([v.name, reason], n)
        yield up
        yield over
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
        for view in views:
            for key, s, histograms in view.instances:
                lv = [view.name, s.model, s.instance]
                for q, fam in gauges.items():
                    v = getattr(s, q)
                    if v is not None and math.isfinite(v):
                        fam.add_metric(lv, v)
                for q, fam in counters.items():
                    v = getattr(s, q)
                    if v is not None and math.isfinite(v):
                        fam.add_metric(lv, v)
                for q, fam in hists.items():
                    h = histograms.get(q)
                    if h is not None:
                        fam.add_metric(
                            lv, _buckets(h), h.sum if h.sum is not None and math.isfinite(h.sum) else None
                        )
                d = view.derived.get(key)
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


def registry_of(views: Callable[[], list[TargetView]]) -> CollectorRegistry:
    """A private registry holding only the kvscope collector (never the global REGISTRY)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KvscopeCollector(views))
    return registry


def make_registry(exporter: Exporter) -> CollectorRegistry:
    """A registry that reads `exporter` live at each collection (on the caller's thread)."""
    return registry_of(lambda: snapshot(exporter))


def render(
    views: list[TargetView],
    encoder: Callable[[CollectorRegistry], bytes],
    extra: tuple[Collector, ...] = (),
) -> bytes:
    """`encoder`'s exposition of fixed views, and of `extra` collectors (each must be safe to
    collect from a worker thread): safe on a worker thread."""
    registry = registry_of(lambda: views)
    for collector in extra:
        registry.register(collector)
    return encoder(registry)
