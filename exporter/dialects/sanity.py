"""Impossible values, dropped before anything reads them.

The rule (exporter/METRICS.md, "Impossible values"): a quantity outside its range in
`exporter.quantities` (negative counts and counters, a KV usage above 1, a capacity or block
size below 1), a `gpu_memory_utilization` outside (0, 1], prefix-cache hits above the
queries they are part of, or a histogram with a negative or decreasing bucket, a negative
count or sum, is set to None (unknown), never re-exported as it came. A value within 1e-9
of a bound is clamped to it instead: that is float rounding, not a broken engine. Each
dropped value is counted; the notes say which quantity, how often and one example.

Pure: mutates the samples it is given, touches nothing else.
"""

from __future__ import annotations

from exporter.dialects.sample import EngineSample, HistogramSample
from exporter.quantities import ALL

_SCALARS = tuple(q for q in ALL if q.kind != "histogram")
_HISTOGRAMS = tuple(q.name for q in ALL if q.kind == "histogram")
_ROUNDING = 1e-9


def _histogram_ok(h: HistogramSample) -> bool:
    counts = h.counts
    if any(c < 0 for c in counts) or any(b < a for a, b in zip(counts, counts[1:])):
        return False
    return (h.count is None or h.count >= 0) and (h.sum is None or h.sum >= 0)


def drop_impossible(samples: list[EngineSample]) -> tuple[int, list[str]]:
    """Drop (or clamp, see the module doc) every impossible value; (values dropped, notes)."""
    found: dict[str, list] = {}  # quantity -> [times dropped, first example]

    def drop(sample: EngineSample, name: str, value: object, why: str) -> None:
        if name in _HISTOGRAMS:
            del sample.histograms[name]
        else:
            setattr(sample, name, None)
        entry = found.setdefault(name, [0, f"{value} on instance {sample.instance!r} ({why})"])
        entry[0] += 1

    for s in samples:
        for q in _SCALARS:
            v = getattr(s, q.name)
            if v is None or q.low <= v <= q.high:
                continue
            if q.low - _ROUNDING <= v <= q.high + _ROUNDING:
                setattr(s, q.name, min(max(v, q.low), q.high))
            else:
                drop(s, q.name, v, f"outside [{q.low:g}, {q.high:g}]")
        u = s.gpu_memory_utilization
        if u is not None and not 0 < u <= 1:
            drop(s, "gpu_memory_utilization", u, "outside (0, 1]")
        hits, queries = s.prefix_cache_hits_tokens, s.prefix_cache_queries_tokens
        if hits is not None and queries is not None and hits > queries + _ROUNDING:
            drop(s, "prefix_cache_hits_tokens", hits, f"more than the {queries:g} queried")
        for name, h in list(s.histograms.items()):
            if not _histogram_ok(h):
                drop(s, name, "histogram", "negative or decreasing")
    notes = [
        f"impossible {name} dropped on {n} instance{'s' if n > 1 else ''}, e.g. {example}"
        for name, (n, example) in found.items()
    ]
    return sum(n for n, _ in found.values()), notes
