"""LMDeploy (docs/reference/metric-dialects.md §6): vLLM-like names under `lmdeploy:`, no preemption metric.

The local prefix-cache hit rate exists only as a window-less gauge, so the prefix counters
stay unknown. Capacity comes from `backend_config_info` when its labels carry the block
size (`block_size` or TurboMind's `cache_block_seq_len`) and `num_gpu_blocks`; a KV
`quant_policy` of 8 or 4 means an int8 / int4 KV cache.
"""

from __future__ import annotations

from exporter.dialects.common import FamilyIndex, Keyer, Spec, extract, fill_capacity, num, unobserved_note
from exporter.dialects.sample import Normalised

SPEC = Spec(
    gauges={
        "kv_usage_ratio": (("lmdeploy_gpu_cache_usage_perc",), None),
        "requests_running": (("lmdeploy_num_requests_running",), None),
        "requests_waiting": (("lmdeploy_num_requests_waiting",), None),
    },
    counters={
        "prompt_tokens": (("lmdeploy_prompt_tokens_total",), None),
        "generation_tokens": (("lmdeploy_generation_tokens_total",), None),
        "requests_finished": (("lmdeploy_request_success_total",), None),
    },
    histograms={
        "time_to_first_token_seconds": ("lmdeploy_time_to_first_token_seconds",),
        "inter_token_latency_seconds": (
            "lmdeploy_iter_token_latency",
            "lmdeploy_time_per_output_token_seconds",
        ),
        "e2e_request_latency_seconds": ("lmdeploy_e2e_request_latency_seconds",),
        "request_queue_time_seconds": ("lmdeploy_request_queue_time_seconds",),
    },
    prefixes=("lmdeploy_",),
)
QUANT_POLICY = {"0": "auto", "4": "int4", "8": "int8"}


def normalise(idx: FamilyIndex) -> Normalised:
    samples, _ = extract(idx, SPEC, Keyer(model_labels=("model_name",), instance_labels=("engine",)))
    notes: list[str] = []
    for labels, _ in idx.rows("lmdeploy_backend_config_info"):
        for s in samples.values():
            if "engine" in labels and s.labels.get("engine", "0") != labels["engine"]:
                continue
            s.kv_block_size_tokens = num(labels.get("block_size") or labels.get("cache_block_seq_len"))
            s.kv_capacity_blocks = num(labels.get("num_gpu_blocks"))
            s.kv_cache_dtype = QUANT_POLICY.get(labels.get("quant_policy", ""))
            fill_capacity(s)
    notes.append("preemptions unknown: LMDeploy exports no preemption metric")
    if idx.has("lmdeploy_prefix_cache_hit_rate"):
        notes.append(
            "ignored lmdeploy:prefix_cache_hit_rate (a gauge without a window); prefix counters unknown"
        )
    else:
        notes.append("prefix-cache counters unknown in LMDeploy")
    notes += unobserved_note(idx, ("lmdeploy_",))
    return Normalised("lmdeploy", None, list(samples.values()), notes=notes)
