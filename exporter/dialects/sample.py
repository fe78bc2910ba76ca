"""Canonical, engine-independent view of one engine instance at one scrape.

The fields are the scalar quantities and facts of `exporter.quantities`, one each (a test
holds them equal). Invariant: a quantity the engine does not report (or reported as NaN/Inf) is None, never
0 — "unknown" and "zero" lead to opposite advice. Counters are cumulative values exactly
as the engine reports them (they drop when the engine restarts; `series` handles that).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from exporter.quantities import FACTS, QUANTITIES, Key


@dataclass(slots=True)
class HistogramSample:
    """Cumulative histogram: `bounds` ascending and ending with +Inf, `counts` cumulative.

    `sum`/`count` are None when the exposition did not carry them (truncated pastes).
    """

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    sum: float | None = None
    count: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "bounds": [_json_float(b) for b in self.bounds],
            "counts": list(self.counts),
            "sum": self.sum,
            "count": self.count,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HistogramSample:
        return cls(
            tuple(float(b) for b in d["bounds"]),
            tuple(float(c) for c in d["counts"]),
            d.get("sum"),
            d.get("count"),
        )


def _json_float(x: float) -> float | str:
    return "+Inf" if x == math.inf else x


@dataclass(slots=True)
class EngineSample:
    """One engine instance (model, data-parallel rank, ...) at one scrape.

    `model`/`instance` identify the series (re-exported as labels `model`, `instance`);
    `labels` are the engine's own identifying labels, verbatim. `prefix_cache_unit` says
    what the prefix counters count: "tokens", "blocks" (vLLM < 0.9.0, TRT-LLM; converted to
    tokens only when the block size is known) or None when unknown.
    """

    model: str
    instance: str
    labels: dict[str, str] = field(default_factory=dict)
    kv_usage_ratio: float | None = None
    kv_capacity_blocks: float | None = None
    kv_block_size_tokens: float | None = None
    kv_capacity_tokens: float | None = None
    prefix_cache_queries_tokens: float | None = None
    prefix_cache_hits_tokens: float | None = None
    preemptions: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    requests_finished: float | None = None
    kv_cache_dtype: str | None = None
    gpu_memory_utilization: float | None = None
    prefix_cache_unit: str | None = None
    enable_prefix_caching: bool | None = None  # as the engine's config-info states it
    histograms: dict[str, HistogramSample] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.model, self.instance)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"labels": dict(self.labels), "model": self.model, "instance": self.instance}
        for q in QUANTITIES + FACTS:
            d[q] = getattr(self, q)
        d["histograms"] = {k: h.to_dict() for k, h in self.histograms.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineSample:
        """Inverse of `to_dict` (used by the harness on recorded JSON lines)."""
        names = {f.name for f in fields(cls)} - {"histograms", "labels"}
        kw = {k: d[k] for k in names if k in d}
        hists = {k: HistogramSample.from_dict(v) for k, v in (d.get("histograms") or {}).items()}
        return cls(labels=dict(d.get("labels") or {}), histograms=hists, **kw)


@dataclass(slots=True)
class Normalised:
    """Everything one exposition says, in canonical form.

    `instances` are per engine instance; `aggregates` hold one entry per model that has two
    or more instances (data parallelism), with instance "all". `notes` say what was
    approximated, ignored or missing.
    """

    dialect: str
    variant: str | None = None
    instances: list[EngineSample] = field(default_factory=list)
    aggregates: list[EngineSample] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dialect": self.dialect,
            "variant": self.variant,
            "instances": [s.to_dict() for s in self.instances + self.aggregates],
            "notes": list(self.notes),
        }
