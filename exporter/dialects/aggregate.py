"""Combine the instances of one model (data-parallel engines/ranks) into one view.

Rules (docs/reference/metric-dialects.md §8, gotcha 9): counters, running and waiting requests and capacities
are summed over the instances that report them (SGLang's tokenizer-level counters exist only
on one instance, and are the server's totals); KV usage is the capacity-weighted mean (used /
total, in blocks or else tokens) when every capacity is known, else the max (the
conservative choice for saturation); block size, dtype and memory utilisation survive only
when all instances agree. Aggregates are for reading (inspect, API), not for rates: an
instance that stops reporting a counter would make the sum drop.
"""

from __future__ import annotations

import math

from exporter.dialects.sample import EngineSample, HistogramSample
from exporter.quantities import ALL, FACTS, HISTOGRAMS

_SUMMED = tuple(q.name for q in ALL if q.kind != "histogram" and q.combine == "sum")
_COMMON = tuple(q.name for q in ALL if q.combine == "common") + FACTS


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return math.fsum(known) if known else None


def _common(values: list) -> object | None:
    return values[0] if values and all(v == values[0] for v in values) else None


def _usage(group: list[EngineSample]) -> float | None:
    usage = [s.kv_usage_ratio for s in group]
    if any(u is None for u in usage):
        return None
    for caps in ([s.kv_capacity_blocks for s in group], [s.kv_capacity_tokens for s in group]):
        if all(c for c in caps):
            return math.fsum(u * c for u, c in zip(usage, caps)) / math.fsum(caps)  # type: ignore[operator,misc]
    return max(usage)  # type: ignore[type-var]


def _hist(hs: list[HistogramSample | None]) -> HistogramSample | None:
    if not hs or any(h is None for h in hs) or any(h.bounds != hs[0].bounds for h in hs):  # type: ignore[union-attr]
        return None
    counts = tuple(math.fsum(c) for c in zip(*(h.counts for h in hs)))  # type: ignore[union-attr]
    sums, cnts = [h.sum for h in hs], [h.count for h in hs]  # type: ignore[union-attr]
    return HistogramSample(
        hs[0].bounds, counts, None if None in sums else _sum(sums), None if None in cnts else _sum(cnts)
    )


def aggregate(instances: list[EngineSample]) -> list[EngineSample]:
    """One aggregate (instance "all") per model with two or more instances."""
    by_model: dict[str, list[EngineSample]] = {}
    for s in instances:
        by_model.setdefault(s.model, []).append(s)
    out = []
    for model, group in sorted(by_model.items()):
        if len(group) < 2:
            continue
        labels = {k: v for k, v in group[0].labels.items() if all(g.labels.get(k) == v for g in group)}
        for k in group[0].labels:
            if k not in labels:
                labels[k] = "all"
        agg = EngineSample(model=model, instance="all", labels=labels)
        for q in _SUMMED:
            setattr(agg, q, _sum([getattr(s, q) for s in group]))
        for q in _COMMON:
            setattr(agg, q, _common([getattr(s, q) for s in group]))
        agg.kv_usage_ratio = _usage(group)
        for h in HISTOGRAMS:
            merged = _hist([s.histograms[h] for s in group if h in s.histograms])
            if merged is not None:
                agg.histograms[h] = merged
        out.append(agg)
    return out
