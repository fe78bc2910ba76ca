"""Shared machinery for the dialect modules: a name index and per-instance extractors.

Names are looked up after rewriting `:` to `_`, so `vllm:x` and a gateway's `vllm_x` are the
same family (docs/reference/metric-dialects.md §8, gotcha 6). Each canonical quantity has an ordered list of
aliases (newest name first); the first alias that has samples wins for the whole exposition.
Extractors group samples by an instance key that the dialect chooses (`Keyer`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from exporter.dialects.sample import EngineSample, HistogramSample
from exporter.parse import Exposition, Labels
from exporter.quantities import Key


def norm(name: str) -> str:
    return name.replace(":", "_")


class FamilyIndex:
    """Samples and declared names of one exposition, keyed by `norm(name)`."""

    __slots__ = ("samples", "declared", "helps")

    def __init__(self, exp: Exposition) -> None:
        self.samples: dict[str, list[tuple[Labels, float]]] = {}
        for name, rows in exp.samples.items():
            self.samples.setdefault(norm(name), rows)
        self.helps = {norm(k): v for k, v in exp.helps.items()}
        self.declared = set(self.helps) | {norm(k) for k in exp.types}

    def rows(self, name: str) -> list[tuple[Labels, float]]:
        return self.samples.get(name, [])

    def has(self, name: str) -> bool:
        return name in self.samples

    def names(self) -> set[str]:
        return set(self.samples) | self.declared

    def first(self, names: Iterable[str]) -> str | None:
        for n in names:
            if n in self.samples:
                return n
        return None


@dataclass(slots=True)
class Keyer:
    """Maps a sample's labels to (model, instance) and the identifying labels.

    `drop(labels)` returning True discards the sample (e.g. a non-zero tensor-parallel rank
    that re-exports the same scheduler gauge). Results are cached by `id()` of the label
    dict: the parser shares one dict per distinct label text, so this is one dict lookup per
    sample. Hence a Keyer lives for one normalisation only, while its Exposition is alive
    (ids of dead dicts can be reused).
    """

    model_labels: tuple[str, ...]
    instance_labels: tuple[str, ...] = ()
    default_instance: str = "0"
    drop: Callable[[Labels], bool] | None = None
    _cache: dict[int, tuple[Key, dict[str, str]] | None] = field(default_factory=dict)

    def __call__(self, labels: Labels) -> tuple[Key, dict[str, str]] | None:
        hit = self._cache.get(id(labels), False)
        if hit is not False:
            return hit  # type: ignore[return-value]
        out: tuple[Key, dict[str, str]] | None
        if self.drop is not None and self.drop(labels):
            out = None
        else:
            ident: dict[str, str] = {}
            model = ""
            for lbl in self.model_labels:
                if lbl in labels:
                    model = labels[lbl]
                    ident[lbl] = model
                    break
            parts = []
            for lbl in self.instance_labels:
                if lbl in labels:
                    ident[lbl] = labels[lbl]
                    parts.append(labels[lbl])
            out = ((model, "/".join(parts) or self.default_instance), ident)
        self._cache[id(labels)] = out
        return out


Where = tuple[str, str] | None


def _matches(labels: Labels, where: Where) -> bool:
    return where is None or labels.get(where[0]) == where[1]


def gauge(
    idx: FamilyIndex,
    names: Sequence[str],
    keyer: Keyer,
    where: Where = None,
    ids: dict[Key, dict[str, str]] | None = None,
) -> tuple[dict[Key, float], str | None]:
    """First finite value per instance of the first alias with samples."""
    name = idx.first(names)
    out: dict[Key, float] = {}
    if name is None:
        return out, None
    for labels, value in idx.rows(name):
        if not _matches(labels, where) or not math.isfinite(value):
            continue
        k = keyer(labels)
        if k is not None and k[0] not in out:
            out[k[0]] = value
            if ids is not None:
                ids.setdefault(k[0], k[1])
    return out, name


def counter(
    idx: FamilyIndex,
    names: Sequence[str],
    keyer: Keyer,
    where: Where = None,
    ids: dict[Key, dict[str, str]] | None = None,
) -> tuple[dict[Key, float], str | None]:
    """Sum per instance (over extra labels such as finished_reason) of the first alias.

    Negative or non-finite values are not counters: they are skipped, leaving None.
    """
    name = idx.first(names)
    out: dict[Key, float] = {}
    if name is None:
        return out, None
    for labels, value in idx.rows(name):
        if not _matches(labels, where) or not math.isfinite(value) or value < 0:
            continue
        k = keyer(labels)
        if k is not None:
            out[k[0]] = out.get(k[0], 0.0) + value
            if ids is not None:
                ids.setdefault(k[0], k[1])
    return out, name


def _le(labels: Labels) -> float | None:
    le = labels.get("le")
    if le is None:
        return None
    try:
        return float(le)
    except ValueError:
        return None


def histogram(
    idx: FamilyIndex, bases: Sequence[str], keyer: Keyer, ids: dict[Key, dict[str, str]] | None = None
) -> tuple[dict[Key, HistogramSample], str | None]:
    """Histograms per instance of the first base name with `_bucket` samples.

    Series of one instance that differ only in extra labels (e.g. vLLM's `priority`) are
    summed bucket by bucket. A missing +Inf bucket is filled from `_count` (or the largest
    bucket); counts are forced non-decreasing so a torn fragment stays a valid histogram.
    """
    out: dict[Key, HistogramSample] = {}
    base = idx.first([b + "_bucket" for b in bases])
    if base is None:
        return _count_only(idx, bases, keyer, ids)
    base = base[: -len("_bucket")]
    buckets: dict[Key, dict[float, float]] = {}
    for labels, value in idx.rows(base + "_bucket"):
        le = _le(labels)
        if le is None or le != le or not math.isfinite(value):
            continue
        k = keyer(labels)  # `le` is never an identifying label, so the bucket dict keys fine
        if k is None:
            continue
        b = buckets.setdefault(k[0], {})
        b[le] = b.get(le, 0.0) + value
        if ids is not None:
            ids.setdefault(k[0], k[1])
    sums = _sum_by_key(idx.rows(base + "_sum"), keyer)
    counts = _sum_by_key(idx.rows(base + "_count"), keyer)
    for key, b in buckets.items():
        count = counts.get(key)
        if math.inf not in b:
            b[math.inf] = count if count is not None else max(b.values())
        bounds = tuple(sorted(b))
        cum, run = [], 0.0
        for le in bounds:
            run = max(run, b[le])
            cum.append(run)
        out[key] = HistogramSample(bounds, tuple(cum), sums.get(key), count)
    return out, base


def bases_with(bases: Sequence[str], suffix: str) -> list[str]:
    return [b + suffix for b in bases]


def _count_only(
    idx: FamilyIndex, bases: Sequence[str], keyer: Keyer, ids: dict[Key, dict[str, str]] | None
) -> tuple[dict[Key, HistogramSample], str | None]:
    """A fragment with `_count` (and maybe `_sum`) but no bucket line: a one-bucket (+Inf)
    histogram, so the instance and its request count survive a paste that lost the buckets."""
    name = idx.first(bases_with(bases, "_count"))
    if name is None:
        return {}, None
    base = name[: -len("_count")]
    counts = _sum_by_key(idx.rows(name), keyer, ids)
    sums = _sum_by_key(idx.rows(base + "_sum"), keyer)
    return {k: HistogramSample((math.inf,), (c,), sums.get(k), c) for k, c in counts.items()}, base


def _sum_by_key(
    rows: list[tuple[Labels, float]], keyer: Keyer, ids: dict[Key, dict[str, str]] | None = None
) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for labels, value in rows:
        if not math.isfinite(value):
            continue
        k = keyer(labels)
        if k is not None:
            out[k[0]] = out.get(k[0], 0.0) + value
            if ids is not None:
                ids.setdefault(k[0], k[1])
    return out


def num(text: str | None) -> float | None:
    """Parse a config label value ("16", "None", "0.9") defensively: None unless finite > 0."""
    if text is None:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) and v > 0 else None


def assemble(
    ids: dict[Key, dict[str, str]],
    values: dict[str, dict[Key, float]],
    hists: dict[str, dict[Key, HistogramSample]],
) -> dict[Key, EngineSample]:
    """Build one EngineSample per instance key seen in any quantity."""
    out: dict[Key, EngineSample] = {}
    for key in sorted(ids):
        s = EngineSample(model=key[0], instance=key[1], labels=dict(ids[key]))
        for q, per_key in values.items():
            if key in per_key:
                setattr(s, q, per_key[key])
        for h, per_key in hists.items():
            if key in per_key:
                s.histograms[h] = per_key[key]
        out[key] = s
    return out


def fill_capacity(s: EngineSample) -> None:
    """Derive the missing one of blocks x block size = tokens, when two are known."""
    if s.kv_capacity_tokens is None and s.kv_capacity_blocks is not None and s.kv_block_size_tokens:
        s.kv_capacity_tokens = s.kv_capacity_blocks * s.kv_block_size_tokens
    if s.kv_capacity_blocks is None and s.kv_capacity_tokens is not None and s.kv_block_size_tokens:
        s.kv_capacity_blocks = s.kv_capacity_tokens / s.kv_block_size_tokens


@dataclass(frozen=True, slots=True)
class Spec:
    """Aliases per canonical quantity for one dialect (newest name first).

    Each entry maps a quantity to `(aliases, where)`, `where` being an optional
    `(label, value)` selector for engines that multiplex quantities over one family.
    `prefixes` name the engine's families, whose series all count for `complete_instances`.
    """

    gauges: dict[str, tuple[tuple[str, ...], Where]] = field(default_factory=dict)
    counters: dict[str, tuple[tuple[str, ...], Where]] = field(default_factory=dict)
    histograms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    prefixes: tuple[str, ...] = ()  # the engine's families: any of them names instances


def extract(idx: FamilyIndex, spec: Spec, keyer: Keyer) -> tuple[dict[Key, EngineSample], dict[str, str]]:
    """Apply a Spec: one EngineSample per instance (seen on any of the engine's series, see
    `complete_instances`), and which alias each quantity used."""
    ids: dict[Key, dict[str, str]] = {}
    values: dict[str, dict[Key, float]] = {}
    hists: dict[str, dict[Key, HistogramSample]] = {}
    used: dict[str, str] = {}
    for q, (names, where) in spec.gauges.items():
        values[q], name = gauge(idx, names, keyer, where, ids)
        if name:
            used[q] = name
    for q, (names, where) in spec.counters.items():
        values[q], name = counter(idx, names, keyer, where, ids)
        if name:
            used[q] = name
    for h, bases in spec.histograms.items():
        hists[h], name = histogram(idx, bases, keyer, ids)
        if name:
            used[h] = name
    samples = assemble(ids, values, hists)
    complete_instances(idx, keyer, samples, spec.prefixes)
    return samples, used


def complete_instances(
    idx: FamilyIndex, keyer: Keyer, samples: dict[Key, EngineSample], prefixes: tuple[str, ...]
) -> None:
    """Add an (empty) instance for every instance label value (vLLM's `engine`, SGLang's
    `dp_rank`) seen on any series of the engine, also families no quantity reads
    (`vllm:iteration_tokens_total`, info series): a paste that carries one data-parallel rank
    only in such lines still shows that rank. Engines without labels get their one instance
    from any series.

    Only series with an instance label count (SGLang's `func_latency_seconds{name=...}` has a
    `name` that is not a model). A series without the model label (vLLM's cache_config_info
    carries `engine` only) names no new instance when some instance with a model already has
    that instance part.
    """
    unlabelled = not keyer.instance_labels and not keyer.model_labels
    seen: dict[Key, dict[str, str]] = {}
    for name, rows in idx.samples.items():
        if not name.startswith(prefixes):
            continue
        for labels, _ in rows:
            if not unlabelled and not any(lbl in labels for lbl in keyer.instance_labels):
                continue
            k = keyer(labels)
            if k is not None:
                seen.setdefault(k[0], k[1])
    modelled = {key[1] for key in (*samples, *seen) if key[0]}
    for key, ident in seen.items():
        if key not in samples and (key[0] or key[1] not in modelled):
            samples[key] = EngineSample(model=key[0], instance=key[1], labels=dict(ident))


def unobserved(idx: FamilyIndex, prefixes: tuple[str, ...]) -> list[str]:
    """Declared family names (HELP/TYPE) of this engine that have no samples at all."""
    present = idx.samples.keys()
    out = []
    for name in sorted(idx.declared):
        if not name.startswith(prefixes) or name in present:
            continue
        if any(name + s in present for s in ("_total", "_bucket", "_count", "_sum", "_info")):
            continue
        if name.endswith("_created") and name[:-8] + "_total" in present:
            continue
        out.append(name)
    return out


def unobserved_note(idx: FamilyIndex, prefixes: tuple[str, ...]) -> list[str]:
    missing = unobserved(idx, prefixes)
    if not missing:
        return []
    shown = ", ".join(missing[:6]) + (" ..." if len(missing) > 6 else "")
    return [f"{len(missing)} families declared without samples (unknown, not 0): {shown}"]
