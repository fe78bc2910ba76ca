"""TensorRT-LLM through Triton (`nv_trt_llm_*`) and `trtllm-serve` (docs/reference/metric-dialects.md §4).

Triton multiplexes quantities over one gauge family with a sub-label; its model identity is
(`model`, `version`). There is no preemption counter (only the instantaneous
`paused_requests` gauge) and no prefix-cache miss counter, so both stay unknown.

Triton exposing only its general `nv_inference_*` families (the TRT-LLM backend's own
metrics off or absent) for a TensorRT-LLM model (`model` label such as `tensorrt_llm`, see
`detect.trtllm_model`) is still TRT-LLM on Triton: finished requests from
`nv_inference_request_success`, everything about the KV cache and the batch unknown.

trtllm-serve: `trtllm_*` names (2026), or the five unprefixed 1.0/1.1 names. Prefix hits
prefer token counters (`prompt_cached_tokens_total` / `prompt_tokens_total`); the block
counters (reused / reused + missed) are converted with `kv_cache_tokens_per_block`.
"""

from __future__ import annotations

from exporter.dialects.common import (
    FamilyIndex,
    Keyer,
    Spec,
    counter,
    extract,
    fill_capacity,
    unobserved_note,
)
from exporter.dialects.detect import UNPREFIXED_TRTLLM, trtllm_model
from exporter.dialects.sample import Normalised

KV = "nv_trt_llm_kv_cache_block_metrics"
REQ = "nv_trt_llm_request_metrics"
TRITON = Spec(
    gauges={
        "kv_usage_ratio": ((KV,), ("kv_cache_block_type", "fraction")),
        "kv_capacity_blocks": ((KV,), ("kv_cache_block_type", "max")),
        "kv_block_size_tokens": ((KV,), ("kv_cache_block_type", "tokens_per")),
        "requests_running": ((REQ,), ("request_type", "active")),
        "requests_waiting": ((REQ,), ("request_type", "waiting")),
    },
    prefixes=("nv_trt_llm_", "nv_llm_"),
)
SERVE = Spec(
    gauges={
        "kv_usage_ratio": (("trtllm_kv_cache_utilization",), None),
        "kv_capacity_blocks": (("trtllm_kv_cache_max_blocks",), None),
        "kv_block_size_tokens": (("trtllm_kv_cache_tokens_per_block",), None),
        "requests_running": (("trtllm_num_requests_running",), None),
        "requests_waiting": (("trtllm_num_requests_waiting",), None),
    },
    counters={
        "prompt_tokens": (("trtllm_prompt_tokens_total",), None),
        "generation_tokens": (("trtllm_generation_tokens_total",), None),
        "requests_finished": (("trtllm_request_success_total", "request_success_total"), None),
    },
    histograms={
        "time_to_first_token_seconds": ("trtllm_time_to_first_token_seconds", "time_to_first_token_seconds"),
        "inter_token_latency_seconds": (
            "trtllm_time_per_output_token_seconds",
            "time_per_output_token_seconds",
        ),
        "e2e_request_latency_seconds": ("trtllm_e2e_request_latency_seconds", "e2e_request_latency_seconds"),
        "request_queue_time_seconds": ("trtllm_request_queue_time_seconds", "request_queue_time_seconds"),
    },
    prefixes=("trtllm_", *UNPREFIXED_TRTLLM),
)


TRITON_GENERAL = Spec(
    counters={"requests_finished": (("nv_inference_request_success",), None)}, prefixes=("nv_inference_",)
)


def _triton(idx: FamilyIndex) -> Normalised:
    keyer = Keyer(model_labels=("model",), instance_labels=("version",))
    samples, _ = extract(idx, TRITON, keyer)
    notes = []
    used, _ = counter(idx, (KV,), keyer, ("kv_cache_block_type", "used"))
    for key, s in samples.items():
        fill_capacity(s)
        if s.kv_usage_ratio is not None and s.kv_capacity_blocks and key in used:
            derived = used[key] / s.kv_capacity_blocks
            if abs(derived - s.kv_usage_ratio) > 0.01:
                notes.append(
                    f"{key[0]}: reported fraction {s.kv_usage_ratio:g} disagrees with "
                    f"used/max = {derived:.6g}; the reported fraction is used"
                )
    notes.append("preemptions unknown: Triton exposes only the instantaneous paused_requests gauge")
    notes.append("prefix-cache hit ratio not derivable: Triton exports reused blocks but no misses")
    notes.append("no latency histograms or token counters from the TRT-LLM Triton backend")
    notes += unobserved_note(idx, ("nv_trt_llm_",))
    return Normalised("trtllm", "triton", list(samples.values()), notes=notes)


def _triton_general(idx: FamilyIndex) -> Normalised:
    """Only Triton's own nv_inference_* families: one instance per TensorRT-LLM model."""
    keyer = Keyer(
        model_labels=("model",), instance_labels=("version",), drop=lambda labels: not trtllm_model(labels)
    )
    samples, _ = extract(idx, TRITON_GENERAL, keyer)
    notes = [
        "TensorRT-LLM on Triton recognised from Triton's general nv_inference_* metrics only: KV usage, "
        "capacity, prefix cache, running and waiting unknown (no nv_trt_llm_* backend metrics in "
        "this exposition)",
        "requests_finished from nv_inference_request_success of the TensorRT-LLM model",
    ]
    return Normalised("trtllm", "triton", list(samples.values()), notes=notes)


def _serve(idx: FamilyIndex) -> Normalised:
    keyer = Keyer(model_labels=("model_name",))
    samples, used = extract(idx, SERVE, keyer)
    notes = []
    cached, c_name = counter(idx, ("trtllm_prompt_cached_tokens_total",), keyer)
    reused, r_name = counter(idx, ("trtllm_kv_cache_reused_blocks_total",), keyer)
    missed, _ = counter(idx, ("trtllm_kv_cache_missed_blocks_total",), keyer)
    for key, s in samples.items():
        fill_capacity(s)
        if c_name and key in cached and s.prompt_tokens is not None:
            s.prefix_cache_hits_tokens, s.prefix_cache_queries_tokens = cached[key], s.prompt_tokens
            s.prefix_cache_unit = "tokens"
        elif r_name and key in reused and key in missed:
            scale = s.kv_block_size_tokens or 1.0
            s.prefix_cache_hits_tokens = reused[key] * scale
            s.prefix_cache_queries_tokens = (reused[key] + missed[key]) * scale
            s.prefix_cache_unit = "tokens" if s.kv_block_size_tokens else "blocks"
    if any(s.prefix_cache_unit for s in samples.values()) and not c_name:
        notes.append(
            "approximated: block-counted prefix statistics (reused, reused + missed blocks) "
            "x tokens_per_block"
        )
    notes.append("preemptions unknown: trtllm-serve exposes only the trtllm_num_paused_requests gauge")
    if "inter_token_latency_seconds" in used:
        notes.append("inter-token latency from time_per_output_token_seconds (per-request TPOT)")
    variant = "serve" if any(n.startswith("trtllm_") for n in idx.names()) else "serve-1.0-unprefixed"
    notes += unobserved_note(idx, ("trtllm_",))
    return Normalised("trtllm", variant, list(samples.values()), notes=notes)


def normalise(idx: FamilyIndex) -> Normalised:
    names = idx.names()
    if any(n.startswith(("nv_trt_llm_", "nv_llm_")) for n in names):
        return _triton(idx)
    if not any(n.startswith("trtllm_") or n in UNPREFIXED_TRTLLM for n in names) and any(
        n.startswith("nv_inference_") for n in names
    ):
        return _triton_general(idx)
    return _serve(idx)
