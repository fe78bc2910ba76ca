"""Partial and unusual expositions: every engine instance survives however little of it a
paste carries (a histogram fragment without HELP/TYPE, only `_sum`/`_count`, a family no
quantity reads), and Triton serving TensorRT-LLM with only its general `nv_inference_*`
families is still TensorRT-LLM on Triton, with the KV quantities unknown."""

from __future__ import annotations

from exporter.dialects import normalise
from exporter.parse import parse_exposition

# A paste that starts in the middle of a line of the TTFT histogram; engine 1 appears only in
# its buckets, engine 2 only in another histogram's _sum/_count, engine 3 only in a family no
# canonical quantity reads, engine 4 only in cache_config_info (which has no model label).
VLLM_FRAGMENT = """\
_seconds_bucket{engine="1",le="0.5",model_name="m"} 3
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 5
vllm:e2e_request_latency_seconds_sum{engine="2",model_name="m"} 1.5
vllm:e2e_request_latency_seconds_count{engine="2",model_name="m"} 3
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2
vllm:iteration_tokens_total_bucket{engine="3",le="1.0",model_name="m"} 2
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="100"} 1
vllm:cache_config_info{block_size="16",engine="4",num_gpu_blocks="100"} 1
"""


def by_instance(text: str) -> dict:
    return {(s.model, s.instance): s for s in normalise(parse_exposition(text)).instances}


def test_every_engine_label_on_any_series_is_an_instance() -> None:
    got = by_instance(VLLM_FRAGMENT)
    assert set(got) == {("m", "0"), ("m", "1"), ("m", "2"), ("m", "3"), ("", "4")}
    assert got[("m", "1")].histograms["time_to_first_token_seconds"].counts[-1] == 5
    e2e = got[("m", "2")].histograms["e2e_request_latency_seconds"]  # only _sum and _count
    assert (e2e.bounds, e2e.counts, e2e.sum, e2e.count) == ((float("inf"),), (3.0,), 1.5, 3.0)
    assert got[("m", "0")].requests_running == 2 and got[("m", "0")].kv_capacity_blocks == 100
    assert got[("m", "3")].requests_running is None  # present, with nothing known about it
    assert got[("", "4")].kv_block_size_tokens == 16


def test_a_model_less_info_series_adds_no_twin_of_a_known_instance() -> None:
    got = by_instance(VLLM_FRAGMENT.replace('engine="4"', 'engine="1"'))
    assert ("", "1") not in got and got[("m", "1")].kv_block_size_tokens == 16


def test_sglang_rank_seen_only_in_a_histogram_fragment() -> None:
    text = """\
sglang:num_running_reqs{dp_rank="0",model_name="q",tp_rank="0"} 3
sglang:e2e_request_latency_seconds_count{dp_rank="1",model_name="q",tp_rank="0"} 7
sglang:func_latency_seconds_bucket{le="0.05",name="generate_request"} 14
"""
    got = by_instance(text)
    assert set(got) == {("q", "0"), ("q", "1")}  # `name` on func_latency is a function, not a model
    assert got[("q", "1")].histograms["e2e_request_latency_seconds"].count == 7


# Triton's general families (its metrics docs): per model and version, for the models of
# tensorrtllm_backend's inflight_batcher_llm repository, with the backend's own
# nv_trt_llm_* metrics absent.
TRITON_GENERAL = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="ensemble",version="1"} 42
nv_inference_request_success{model="preprocessing",version="1"} 42
nv_inference_request_success{model="tensorrt_llm",version="1"} 42
nv_inference_request_success{model="postprocessing",version="1"} 42
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 0
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-0"} 0.31
"""


def test_triton_general_metrics_of_a_tensorrt_llm_model() -> None:
    norm = normalise(parse_exposition(TRITON_GENERAL))
    assert (norm.dialect, norm.variant) == ("trtllm", "triton")
    (s,) = norm.instances  # the TensorRT-LLM model, not the ensemble's pre/post-processing steps
    assert (s.model, s.instance, s.requests_finished) == ("tensorrt_llm", "1", 42)
    unknown = ("kv_usage_ratio", "kv_capacity_blocks", "prefix_cache_hits_tokens", "requests_running")
    assert all(getattr(s, q) is None for q in unknown)
    assert any("KV usage, capacity" in n and "unknown" in n for n in norm.notes)


def test_triton_without_an_llm_model_is_unknown_and_says_why() -> None:
    norm = normalise(parse_exposition(TRITON_GENERAL.replace("tensorrt_llm", "resnet50")))
    assert norm.dialect == "unknown" and not norm.instances
    assert any("nv_inference_*" in n and "TensorRT-LLM" in n for n in norm.notes)
