"""Engine dialects: recognise an exposition's engine and map it to canonical EngineSamples.

`normalise(exposition, dialect)` is the single entry point; `dialect="auto"` detects. Each
engine module exposes `normalise(FamilyIndex) -> Normalised` and states, in `notes`, what it
approximated, ignored or could not provide (those quantities are None, never 0). The facts
behind each mapping are in docs/reference/metric-dialects.md. A dialect whose exposition
lacks a quantity that another endpoint of the server states declares a probe (`PROBES`,
`probe.Probe`); the caller fetches its paths and passes the replies in.

May import: the standard library, `exporter.parse` and `exporter.quantities`; nothing that
does I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.dialects import llamacpp, llamacpp_slots, lmdeploy, sglang, tgi, trtllm, vllm
from exporter.dialects.aggregate import aggregate
from exporter.dialects.common import FamilyIndex
from exporter.dialects.detect import DIALECTS, TRITON_GENERAL, detect
from exporter.dialects.probe import Probe, ProbeInput
from exporter.dialects.sample import EngineSample, HistogramSample, Normalised
from exporter.parse import Exposition

__all__ = ["DIALECTS", "PROBES", "EngineSample", "HistogramSample", "Normalised", "normalise", "probe_for"]

MODULES: dict[str, Callable[[FamilyIndex], Normalised]] = {
    "vllm": vllm.normalise,
    "sglang": sglang.normalise,
    "trtllm": trtllm.normalise,
    "tgi": tgi.normalise,
    "llamacpp": llamacpp.normalise,
    "lmdeploy": lmdeploy.normalise,
}


PROBES: dict[str, Probe] = {"llamacpp": llamacpp_slots.PROBE}


def probe_for(dialect: str | None) -> Probe | None:
    return PROBES.get(dialect or "")


def normalise(exp: Exposition, dialect: str = "auto", probe: ProbeInput | None = None) -> Normalised:
    """Canonical view of one parsed exposition. Never raises on content.

    For a dialect with a probe: `probe.replies` are its fetched paths; without them, a note
    says what stays unknown and why (`probe.unprobed`)."""
    if dialect != "auto" and dialect not in MODULES:
        raise ValueError(f"unknown dialect {dialect!r}; choose auto or one of {', '.join(DIALECTS)}")
    idx = FamilyIndex(exp)
    name = detect(idx) if dialect == "auto" else dialect
    if name not in MODULES:
        notes = ["no known engine metric family found"]
        if any(n.startswith(TRITON_GENERAL) for n in idx.names()):
            notes.append(
                "Triton's general nv_inference_* metrics, but no model label names a TensorRT-LLM model "
                "(such as tensorrt_llm): not an LLM engine kvscope knows"
            )
        return Normalised("unknown", notes=notes)
    out = MODULES[name](idx)
    out.instances.sort(key=lambda s: s.key)
    fetched, dialect_probe = probe or ProbeInput(), PROBES.get(name)
    if dialect_probe is not None and fetched.replies is not None:
        dialect_probe.apply(out, fetched.replies, fetched.settings)
    elif dialect_probe is not None and any(s.kv_usage_ratio is None for s in out.instances):
        why = fetched.unprobed or "read from the exposition alone"
        paths = ", ".join(dialect_probe.paths)
        out.notes.append(f"{dialect_probe.supplies} unknown: GET {paths} not fetched ({why})")
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
