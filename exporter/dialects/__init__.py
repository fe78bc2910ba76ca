"""Engine dialects: recognise an exposition's engine and map it to canonical EngineSamples.

`normalise(exposition, dialect)` is the single entry point; `dialect="auto"` detects. Each
engine module exposes `normalise(FamilyIndex) -> Normalised` and states, in `notes`, what it
approximated, ignored or could not provide (those quantities are None, never 0). The facts
behind each mapping are in docs/reference/metric-dialects.md.

May import: the standard library, `exporter.parse` and `exporter.quantities`; nothing that
does I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.dialects import llamacpp, lmdeploy, sglang, tgi, trtllm, vllm
from exporter.dialects.aggregate import aggregate
from exporter.dialects.common import FamilyIndex
from exporter.dialects.detect import DIALECTS, detect
from exporter.dialects.sample import EngineSample, HistogramSample, Normalised
from exporter.dialects.sanity import drop_impossible
from exporter.parse import Exposition

__all__ = ["DIALECTS", "EngineSample", "HistogramSample", "Normalised", "normalise"]

MODULES: dict[str, Callable[[FamilyIndex], Normalised]] = {
    "vllm": vllm.normalise,
    "sglang": sglang.normalise,
    "trtllm": trtllm.normalise,
    "tgi": tgi.normalise,
    "llamacpp": llamacpp.normalise,
    "lmdeploy": lmdeploy.normalise,
}


def normalise(exp: Exposition, dialect: str = "auto") -> Normalised:
    """Canonical view of one parsed exposition. Never raises on content."""
    if dialect != "auto" and dialect not in MODULES:
        raise ValueError(f"unknown dialect {dialect!r}; choose auto or one of {', '.join(DIALECTS)}")
    idx = FamilyIndex(exp)
    name = detect(idx) if dialect == "auto" else dialect
    if name not in MODULES:
        return Normalised("unknown", notes=["no known engine metric family found"])
    out = MODULES[name](idx)
    out.impossible, impossible_notes = drop_impossible(out.instances)
    out.notes += impossible_notes
    out.aggregates = aggregate(out.instances)
    if out.aggregates:
        out.notes.append(
            'aggregates (instance "all"): counters and requests summed, KV usage '
            "capacity-weighted when capacities are known, else max"
        )
    if dialect != "auto" and detect(idx) not in (name, "unknown"):
        out.notes.append(f"dialect forced to {name}, but the exposition looks like {detect(idx)}")
    out.notes = list(dict.fromkeys(out.notes))
    return out
