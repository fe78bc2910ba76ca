"""/metrics: vLLM V1 names and labels, accepted by promtool, and after a scripted workload the
counters and histograms equal what the engine did (tokens, finished requests, prefix-cache
hits in a shared-prefix run, preemptions in a tiny-pool run)."""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reference_engine.config import EngineConfig
from reference_engine.core.launch import CoreLaunch
from reference_engine.server.background import BackgroundServer, serve_in_background

MODEL = "tiny"
LABELS = {"model_name": MODEL, "engine": "0"}
EXPECTED_FAMILIES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:request_num_preemptions": "histogram",
    "vllm:iteration_tokens_total": "histogram",
    "vllm:cache_config_info": "gauge",
}


def start(num_blocks: int, **config) -> BackgroundServer:
    """The engine core in its own process, as `kvscope engine serve` runs it: every figure the
    engine reports below crossed the process boundary."""
    launch = CoreLaunch(EngineConfig(model="tiny-random", num_blocks=num_blocks, max_model_len=256, **config))
    return serve_in_background(launch, MODEL).start()


def scrape(server: BackgroundServer) -> str:
    return urllib.request.urlopen(server.url + "/metrics", timeout=30).read().decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(text: str, name: str, **extra: str) -> float:
    return samples(text)[(name, tuple(sorted({**LABELS, **extra}.items())))]


def run_concurrently(server: BackgroundServer, requests: list[dict]) -> list:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)
    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(lambda kw: client.completions.create(model=MODEL, **kw), requests))


@pytest.fixture(scope="module")
def shared_prefix_run():
    server = start(num_blocks=512)
    prefix = (
        "You are a meticulous assistant. Answer in one short sentence, please. " * 2
    )  # 144 bytes = 9 blocks
    requests = [
        dict(
            prompt=prefix + f"Question {i}?", max_tokens=6 + i, temperature=0, extra_body={"ignore_eos": True}
        )
        for i in range(6)
    ]
    first = run_concurrently(server, requests[:1])  # publishes the prefix blocks
    rest = run_concurrently(server, requests[1:])
    yield server, first + rest
    server.stop()


def test_exposition_has_vllm_names_types_and_labels(shared_prefix_run):
    server, _ = shared_prefix_run
    families = {f.name: f for f in text_string_to_metric_families(scrape(server))}
    assert {name: families[name].type for name in EXPECTED_FAMILIES} == EXPECTED_FAMILIES
    for name in EXPECTED_FAMILIES:
        for s in families[name].samples:
            assert s.labels["engine"] == "0"
            if name != "vllm:cache_config_info":  # as in vLLM: config fields and engine only
                assert s.labels["model_name"] == MODEL
            assert not s.name.endswith("_created")
    (info,) = families["vllm:cache_config_info"].samples
    assert info.value == 1 and info.labels["num_gpu_blocks"] == "512" and info.labels["block_size"] == "16"
    assert {"cache_dtype", "enable_prefix_caching", "allocator"} <= set(info.labels)
    ttft_buckets = [
        s.labels["le"]
        for s in families["vllm:time_to_first_token_seconds"].samples
        if s.name.endswith("_bucket")
    ]
    assert ttft_buckets[0] == "0.001" and ttft_buckets[-2] == "2560.0"
    token_buckets = [
        s.labels["le"] for s in families["vllm:request_prompt_tokens"].samples if s.name.endswith("_bucket")
    ]
    assert token_buckets[-2] == "200.0"  # 1-2-5 buckets up to max_model_len 256


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")
def test_promtool_accepts_the_exposition(shared_prefix_run):
    """promtool parses it (exit 1 would be a format error). Its linter objects to two things
    that are vLLM's own names and must stay: the ':' in every name, and the `_total` suffix of
    the histogram vllm:iteration_tokens_total. Nothing else may be reported."""
    server, _ = shared_prefix_run
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=scrape(server), capture_output=True, text=True, timeout=60
    )
    problems = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode in (0, 3), problems
    unexpected = [
        p
        for p in problems
        if "should not contain ':'" not in p
        and not p.startswith('vllm:iteration_tokens_total non-counter metrics should not have "_total"')
    ]
    assert unexpected == []


def test_counters_equal_what_the_engine_did(shared_prefix_run):
    server, results = shared_prefix_run
    text = scrape(server)
    stats = server.state.engine.stats
    completion_tokens = sum(r.usage.completion_tokens for r in results)
    prompt_tokens = sum(r.usage.prompt_tokens for r in results)
    assert value(text, "vllm:generation_tokens_total") == completion_tokens == stats.generation_tokens
    assert value(text, "vllm:prompt_tokens_total") == prompt_tokens == stats.prompt_tokens
    assert value(text, "vllm:request_success_total", finished_reason="length") == len(results)
    assert value(text, "vllm:request_success_total", finished_reason="stop") == 0
    assert value(text, "vllm:prefix_cache_queries_total") == stats.prefix_cache_queries == prompt_tokens
    hits = value(text, "vllm:prefix_cache_hits_total")
    assert hits == stats.prefix_cache_hits == 5 * 9 * 16  # five requests each hit the 9-block prefix
    assert hits == sum(r.usage.prompt_tokens_details.cached_tokens for r in results)
    assert value(text, "vllm:num_preemptions_total") == 0
    for name in (
        "vllm:e2e_request_latency_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
        "vllm:request_num_preemptions",
    ):
        assert value(text, name + "_count") == len(results), name
    assert value(text, "vllm:request_generation_tokens_sum") == completion_tokens
    assert value(text, "vllm:inter_token_latency_seconds_count") == completion_tokens - len(results)
    assert value(text, "vllm:iteration_tokens_total_count") == stats.steps
    assert value(text, "kvscope:stream_write_delay_seconds_count") == 0  # nothing was streamed
    assert value(text, "vllm:iteration_tokens_total_sum") == stats.scheduled_tokens
    assert value(text, "vllm:kv_cache_usage_perc") == 0.0
    assert value(text, "vllm:num_requests_running") == value(text, "vllm:num_requests_waiting") == 0


def test_tiny_pool_preemptions_are_counted():
    server = start(num_blocks=16)  # 15 usable blocks = 240 tokens, far less than 6 x ~90
    try:
        requests = [
            dict(
                prompt=f"Request number {i} wants a long answer.",
                max_tokens=56,
                temperature=0,
                extra_body={"ignore_eos": True},
            )
            for i in range(6)
        ]
        results = run_concurrently(server, requests)
        text = scrape(server)
        stats = server.state.engine.stats
        assert stats.num_preemptions > 0
        assert value(text, "vllm:num_preemptions_total") == stats.num_preemptions
        per_request = [r.model_extra["kvscope"]["num_preemptions"] for r in results]
        assert sum(per_request) == stats.num_preemptions
        assert value(text, "vllm:request_num_preemptions_sum") == stats.num_preemptions
        assert value(text, "vllm:request_success_total", finished_reason="length") == 6
        assert value(text, "vllm:generation_tokens_total") == 6 * 56 == stats.generation_tokens
        assert value(text, "vllm:kv_cache_usage_perc") == 0.0
    finally:
        server.stop()


def test_kv_cache_metrics_expose_vllms_residency_histograms():
    """--kv-cache-metrics with every allocation sampled: a shared prefix hit by six requests
    in turn, then unrelated requests that evict it, so each histogram is observed, with
    vLLM's buckets and labels; the default server has none of the three families.

    Every request runs alone, so which blocks are evicted does not depend on when a thread
    pool's requests arrive (concurrent unrelated requests that arrived staggered on a busy
    machine reused each other's blocks and left the prefix cached)."""
    server = start(num_blocks=40, kv_cache_metrics=True, kv_cache_metrics_sample=1.0)
    try:

        def alone(prompt: str, max_tokens: int) -> None:
            run_concurrently(
                server,
                [dict(prompt=prompt, max_tokens=max_tokens, temperature=0, extra_body={"ignore_eos": True})],
            )

        prefix = "You are a meticulous assistant. Answer in one short sentence. "  # 3 full blocks
        for i in range(6):  # one after the other: requests 2-6 hit the prefix blocks again
            alone(prefix + f"Q{i}?", 8)
        # 5 requests of 9 new blocks each (distinct from their first byte, so no prefix hits):
        # 45 allocations from a free queue of 39 blocks pop every block that was free before,
        # the prefix's included, since the blocks each request frees go to the queue's tail
        for i in range(5):
            alone(f"{i} entirely different request. " * 4, 16)
        text = scrape(server)
        families = {f.name: f for f in text_string_to_metric_families(text)}
        for name in (
            "vllm:kv_block_lifetime_seconds",
            "vllm:kv_block_idle_before_evict_seconds",
            "vllm:kv_block_reuse_gap_seconds",
        ):
            family = families[name]
            assert family.type == "histogram"
            buckets = [s for s in family.samples if s.name.endswith("_bucket")]
            assert [s.labels["le"] for s in buckets][:3] == ["0.001", "0.002", "0.005"]
            assert buckets[-2].labels["le"] == "1800.0" and len(buckets) == 22
            assert all(s.labels["model_name"] == MODEL and s.labels["engine"] == "0" for s in family.samples)
        assert value(text, "vllm:kv_block_lifetime_seconds_count") > 0
        assert value(text, "vllm:kv_block_idle_before_evict_seconds_count") == value(
            text, "vllm:kv_block_lifetime_seconds_count"
        )  # one of each per eviction of a sampled block
        # each prefix block was hit 5 times; the last 4 hits are kept, so 3 gaps per block
        assert value(text, "vllm:kv_block_reuse_gap_seconds_count") == 3 * 3
    finally:
        server.stop()
    default = start(num_blocks=24)
    try:
        assert "vllm:kv_block_lifetime_seconds" not in scrape(default)
    finally:
        default.stop()
