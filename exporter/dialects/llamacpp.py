"""llama.cpp `llama-server` (docs/reference/metric-dialects.md §5): no labels, no KV metrics since May 2025.

Running = busy slots (`requests_processing`), waiting = deferred tasks. Builds from before
PR #13660 exported `kv_cache_usage_ratio` (0-1), which is used when present.
"""

from __future__ import annotations

from exporter.dialects.common import FamilyIndex, Keyer, Spec, extract, unobserved_note
from exporter.dialects.sample import Normalised

SPEC = Spec(
    gauges={
        "kv_usage_ratio": (("llamacpp_kv_cache_usage_ratio",), None),
        "requests_running": (("llamacpp_requests_processing",), None),
        "requests_waiting": (("llamacpp_requests_deferred",), None),
    },
    counters={
        "prompt_tokens": (("llamacpp_prompt_tokens_total",), None),
        "generation_tokens": (("llamacpp_tokens_predicted_total",), None),
    },
)


def normalise(idx: FamilyIndex) -> Normalised:
    samples, used = extract(idx, SPEC, Keyer(model_labels=()))
    notes: list[str] = []
    if "kv_usage_ratio" not in used:
        notes.append("KV usage unknown: llama.cpp removed its KV gauges (PR #13660); see GET /slots")
    notes.append("no prefix-cache, preemption, finished-request or latency-histogram metrics in llama.cpp")
    notes.append("prompt tokens are processed tokens; slot-cache reuse is likely excluded (unverified)")
    notes += unobserved_note(idx, ("llamacpp_",))
    return Normalised("llamacpp", None, list(samples.values()), notes=notes)
