"""Hugging Face TGI (docs/reference/metric-dialects.md §3): no KV-block, prefix-cache or preemption metric.

KV usage is a labelled proxy: tokens *reserved* by the running batch (prompt + max new
tokens) over the token budget `max_batch_total_tokens`. Counters have no `_total`; token
counts come from the `_sum` of the per-request length histograms. No model label exists.
"""

from __future__ import annotations

from exporter.dialects.common import FamilyIndex, Keyer, Spec, extract, gauge, unobserved_note
from exporter.dialects.sample import Normalised

SPEC = Spec(
    gauges={
        "requests_running": (("tgi_batch_current_size",), None),
        "requests_waiting": (("tgi_queue_size",), None),
        "kv_capacity_tokens": (("tgi_batch_max_total_tokens",), None),
    },
    counters={
        "prompt_tokens": (("tgi_request_input_length_sum",), None),
        "generation_tokens": (("tgi_request_generated_tokens_sum",), None),
        "requests_finished": (("tgi_request_success",), None),
    },
    histograms={
        "inter_token_latency_seconds": ("tgi_request_mean_time_per_token_duration",),
        "e2e_request_latency_seconds": ("tgi_request_duration",),
        "request_queue_time_seconds": ("tgi_request_queue_duration",),
    },
    prefixes=("tgi_",),
)


def normalise(idx: FamilyIndex) -> Normalised:
    keyer = Keyer(model_labels=())
    samples, used = extract(idx, SPEC, keyer)
    reserved, _ = gauge(idx, ("tgi_batch_current_max_tokens",), keyer)
    notes: list[str] = []
    for key, s in samples.items():
        if key in reserved and s.kv_capacity_tokens:
            s.kv_usage_ratio = reserved[key] / s.kv_capacity_tokens
    if reserved:
        notes.append(
            "proxy: KV usage = tgi_batch_current_max_tokens / tgi_batch_max_total_tokens "
            "(reserved tokens, not blocks in use)"
        )
    notes.append("no prefix-cache or preemption metrics in TGI")
    notes.append("no time-to-first-token histogram in TGI")
    if "inter_token_latency_seconds" in used:
        notes.append("inter-token latency from tgi_request_mean_time_per_token_duration (per-request mean)")
    notes += unobserved_note(idx, ("tgi_",))
    return Normalised("tgi", None, list(samples.values()), notes=notes)
