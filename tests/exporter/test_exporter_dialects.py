"""Every fixture in tests/exporter/data/metrics: detected dialect and canonical values, checked by hand.

Expected numbers are read off the fixture files and written here literally. Files named
`synthetic_*` were written for these tests from docs/reference/metric-dialects.md (no real paste exists
for those versions); the others are verbatim real expositions pasted by users or docs, each
naming its source on its first line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.dialects import normalise
from exporter.inspect_cmd import report
from exporter.parse import parse_exposition

DATA = Path(__file__).parent / "data" / "metrics"
FIELDS = (
    "kv_usage_ratio",
    "kv_capacity_blocks",
    "kv_block_size_tokens",
    "kv_capacity_tokens",
    "prefix_cache_queries_tokens",
    "prefix_cache_hits_tokens",
    "preemptions",
    "requests_running",
    "requests_waiting",
    "prompt_tokens",
    "generation_tokens",
    "requests_finished",
)


def inst(labels: dict, **values: float | None) -> dict:
    """An expected instance: every field None unless given."""
    return {"labels": labels, **{f: values.get(f) for f in FIELDS}}


EXPECTED: dict[str, tuple[str, list[dict]]] = {
    "llamacpp_b5600-era_no_labels_pr13196.prom": (
        "llamacpp",
        [inst({}, prompt_tokens=143, generation_tokens=673)],
    ),
    "sglang_0.4.x_docs_production_metrics.prom": (
        "sglang",
        [
            inst(
                {"model_name": "meta-llama/Llama-3.1-8B-Instruct"},
                kv_usage_ratio=0.28,
                requests_running=162,
                requests_waiting=2826,
                prompt_tokens=8128902,
                generation_tokens=7557572,
                requests_finished=11228,
            )
        ],
    ),  # e2e histogram _count; cache_hit_rate 0.0075 ignored
    "trtllm-triton_0.14plus_ifb_nv_trt_llm_readme.prom": (
        "trtllm",
        [
            inst(
                {"model": "tensorrt_llm", "version": "1"},
                kv_usage_ratio=0.4875,
                kv_capacity_blocks=6239,
                kv_block_size_tokens=64,
                kv_capacity_tokens=6239 * 64,
                requests_running=0,
                requests_waiting=1,
            )
        ],
    ),
    "vllm_0.10.0_v1_created_series_deprecated_gpu_prefix_prodstack617.prom": (
        "vllm",
        [
            inst(
                {"model_name": "zai-org/GLM-4.5", "engine": "0"},
                kv_usage_ratio=9.75010481363281e-06,
                prefix_cache_queries_tokens=32,
                prefix_cache_hits_tokens=0,
            )
        ],
    ),
    "vllm_0.6.x_v0_help_type_without_samples_functionary_pr263.prom": ("vllm", []),
    "synthetic_vllm_0.11_v1_dp2_cache_config.prom": (
        "vllm",
        [
            inst(
                {"model_name": "Qwen/Qwen2.5-7B-Instruct", "engine": "0"},
                kv_usage_ratio=0.75,
                kv_capacity_blocks=20000,
                kv_block_size_tokens=16,
                kv_capacity_tokens=320000,
                prefix_cache_queries_tokens=10000,
                prefix_cache_hits_tokens=4000,
                preemptions=7,
                requests_running=12,
                requests_waiting=3,
                prompt_tokens=10000,
                generation_tokens=2500,
                requests_finished=50,
            ),
            inst(
                {"model_name": "Qwen/Qwen2.5-7B-Instruct", "engine": "1"},
                kv_usage_ratio=0.25,
                kv_capacity_blocks=10000,
                kv_block_size_tokens=16,
                kv_capacity_tokens=160000,
                prefix_cache_queries_tokens=6000,
                prefix_cache_hits_tokens=1500,
                preemptions=0,
                requests_running=9,
                requests_waiting=0,
                prompt_tokens=6000,
                generation_tokens=1200,
                requests_finished=30,
            ),
            # aggregate: usage weighted by blocks (0.75*20000 + 0.25*10000) / 30000
            inst(
                {"model_name": "Qwen/Qwen2.5-7B-Instruct", "engine": "all"},
                kv_usage_ratio=17500 / 30000,
                kv_capacity_blocks=30000,
                kv_block_size_tokens=16,
                kv_capacity_tokens=480000,
                prefix_cache_queries_tokens=16000,
                prefix_cache_hits_tokens=5500,
                preemptions=7,
                requests_running=21,
                requests_waiting=3,
                prompt_tokens=16000,
                generation_tokens=3700,
                requests_finished=80,
            ),
        ],
    ),
    "synthetic_vllm_0.8_v1_block_counted_prefix.prom": (
        "vllm",
        [
            # 300 / 120 blocks x block_size 16
            inst(
                {"model_name": "meta-llama/Llama-3.1-8B-Instruct"},
                kv_usage_ratio=0.5,
                kv_capacity_blocks=1000,
                kv_block_size_tokens=16,
                kv_capacity_tokens=16000,
                prefix_cache_queries_tokens=4800,
                prefix_cache_hits_tokens=1920,
                requests_running=4,
                requests_waiting=0,
            )
        ],
    ),
    "synthetic_vllm_rust_frontend_openmetrics.prom": (
        "vllm",
        [
            inst(
                {"model_name": "m", "engine": "0"},
                kv_usage_ratio=0.99,
                preemptions=5,
                requests_waiting=6,
                prompt_tokens=1234,
            )
        ],
    ),
    "synthetic_vllm_gateway_underscored.prom": (
        "vllm",
        [
            inst(
                {"model_name": "m", "engine": "0"},
                kv_usage_ratio=0.125,
                prefix_cache_queries_tokens=64,
                prefix_cache_hits_tokens=48,
                requests_running=2,
                requests_waiting=1,
            )
        ],
    ),
    "synthetic_sglang_2026_dp_tp_ranks.prom": (
        "sglang",
        [
            # kv_used_tokens / max_total_num_tokens = 80000 / 100000 (token_usage 0.9 not used)
            inst(
                {"model_name": "qwen", "dp_rank": "0"},
                kv_usage_ratio=0.8,
                kv_capacity_tokens=100000,
                prefix_cache_queries_tokens=50000,
                prefix_cache_hits_tokens=20000,
                preemptions=11,
                requests_running=30,
                requests_waiting=5,
                prompt_tokens=50000,
                generation_tokens=20000,
                requests_finished=100,
            ),
            inst(
                {"model_name": "qwen", "dp_rank": "1"},
                kv_usage_ratio=0.4,
                kv_capacity_tokens=100000,
                preemptions=0,
                requests_running=20,
                requests_waiting=0,
            ),
            inst(
                {"model_name": "qwen", "dp_rank": "all"},
                kv_usage_ratio=0.6,
                kv_capacity_tokens=200000,
                prefix_cache_queries_tokens=50000,
                prefix_cache_hits_tokens=20000,
                preemptions=11,
                requests_running=50,
                requests_waiting=5,
                prompt_tokens=50000,
                generation_tokens=20000,
                requests_finished=100,
            ),
        ],
    ),
    "synthetic_trtllm-serve_2026_prefixed.prom": (
        "trtllm",
        [
            # prefix: reused 30, reused + missed 100 blocks, x 32 tokens per block
            inst(
                {"model_name": "llama"},
                kv_usage_ratio=0.6,
                kv_capacity_blocks=4096,
                kv_block_size_tokens=32,
                kv_capacity_tokens=131072,
                prefix_cache_queries_tokens=3200,
                prefix_cache_hits_tokens=960,
                requests_running=16,
                requests_waiting=2,
                prompt_tokens=9000,
                generation_tokens=3000,
                requests_finished=30,
            )
        ],
    ),
    "synthetic_trtllm-serve_1.0_unprefixed.prom": (
        "trtllm",
        [inst({"model_name": "undefined"}, requests_finished=15)],
    ),
    "synthetic_tgi_3.x.prom": (
        "tgi",
        [
            # proxy 24576 / 32768 reserved tokens
            inst(
                {},
                kv_usage_ratio=0.75,
                kv_capacity_tokens=32768,
                requests_running=12,
                requests_waiting=4,
                prompt_tokens=120000,
                generation_tokens=40000,
                requests_finished=250,
            )
        ],
    ),
    "synthetic_llamacpp_b5000-era_kv_gauges.prom": (
        "llamacpp",
        [
            inst(
                {},
                kv_usage_ratio=0.42,
                requests_running=2,
                requests_waiting=1,
                prompt_tokens=500,
                generation_tokens=800,
            )
        ],
    ),
    "synthetic_lmdeploy_2026.prom": (
        "lmdeploy",
        [
            inst(
                {"model_name": "internlm", "engine": "0"},
                kv_usage_ratio=0.3,
                kv_capacity_blocks=512,
                kv_block_size_tokens=64,
                kv_capacity_tokens=32768,
                requests_running=6,
                requests_waiting=0,
                prompt_tokens=700,
                generation_tokens=300,
                requests_finished=9,
            )
        ],
    ),
}


def test_every_fixture_is_covered() -> None:
    assert sorted(p.name for p in DATA.glob("*.prom")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_values(name: str) -> None:
    dialect, instances = EXPECTED[name]
    doc = report((DATA / name).read_text())
    assert doc["dialect"] == dialect
    got = [{"labels": i["labels"], **{f: i[f] for f in FIELDS}} for i in doc["instances"]]
    assert _approx_eq(got, instances), (got, instances)
    assert isinstance(doc["notes"], list)


def _approx_eq(got: list[dict], want: list[dict]) -> bool:
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        if g["labels"] != w["labels"]:
            return False
        for f in FIELDS:
            if (g[f] is None) != (w[f] is None) or (w[f] is not None and g[f] != pytest.approx(w[f])):
                return False
    return True


def notes_of(name: str) -> str:
    return "\n".join(report((DATA / name).read_text())["notes"])


def test_notes_say_what_was_approximated_or_missing() -> None:
    assert "block-counted" in notes_of("synthetic_vllm_0.8_v1_block_counted_prefix.prom")
    assert "time_per_output_token" in notes_of("synthetic_vllm_0.8_v1_block_counted_prefix.prom")
    assert "proxy" in notes_of("synthetic_tgi_3.x.prom")
    assert "cache_hit_rate" in notes_of("sglang_0.4.x_docs_production_metrics.prom")
    assert "mix names" in notes_of("vllm_0.10.0_v1_created_series_deprecated_gpu_prefix_prodstack617.prom")
    assert "declared without samples" in notes_of(
        "vllm_0.6.x_v0_help_type_without_samples_functionary_pr263.prom"
    )
    assert "paused_requests" in notes_of("trtllm-triton_0.14plus_ifb_nv_trt_llm_readme.prom")
    assert "KV usage and capacity unknown" in notes_of("llamacpp_b5600-era_no_labels_pr13196.prom")


def test_variants_and_extras() -> None:
    def norm(name: str):
        return normalise(parse_exposition((DATA / name).read_text()))

    assert norm("vllm_0.6.x_v0_help_type_without_samples_functionary_pr263.prom").variant == "v0"
    assert norm("vllm_0.10.0_v1_created_series_deprecated_gpu_prefix_prodstack617.prom").variant == "v1"
    assert norm("trtllm-triton_0.14plus_ifb_nv_trt_llm_readme.prom").variant == "triton"
    assert norm("synthetic_trtllm-serve_1.0_unprefixed.prom").variant == "serve-1.0-unprefixed"
    dp = norm("synthetic_vllm_0.11_v1_dp2_cache_config.prom")
    assert [(s.kv_cache_dtype, s.gpu_memory_utilization) for s in dp.instances] == [("auto", 0.85)] * 2
    ttft = dp.instances[0].histograms["time_to_first_token_seconds"]
    assert ttft.bounds == (0.1, 0.5, 1.0, float("inf")) and ttft.counts == (10, 40, 48, 50)
    assert (ttft.sum, ttft.count) == (14.5, 50)
    assert "time_to_first_token_seconds" in dp.aggregates[0].histograms
    assert norm("synthetic_lmdeploy_2026.prom").instances[0].kv_cache_dtype == "int8"
    old = norm("synthetic_vllm_0.8_v1_block_counted_prefix.prom").instances[0]
    itl = old.histograms["inter_token_latency_seconds"]  # TPOT fallback, _sum written first
    assert itl.counts == (10, 60, 100) and itl.sum == 3.0
    tgi = norm("synthetic_tgi_3.x.prom").instances[0]
    assert set(tgi.histograms) == {"e2e_request_latency_seconds", "request_queue_time_seconds"}


def test_forced_dialect_and_unknown() -> None:
    text = (DATA / "synthetic_tgi_3.x.prom").read_text()
    forced = normalise(parse_exposition(text), "vllm")
    assert forced.dialect == "vllm" and forced.instances == []
    assert any("looks like tgi" in n for n in forced.notes)
    unknown = normalise(parse_exposition("process_cpu_seconds_total 1\n"))
    assert unknown.dialect == "unknown" and unknown.instances == []
    with pytest.raises(ValueError):
        normalise(parse_exposition(text), "nonsense")


def test_nan_gauge_is_unknown_not_zero() -> None:
    text = (
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN\n'
        'vllm:num_requests_running{engine="0",model_name="m"} +Inf\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 0\n'
    )
    s = normalise(parse_exposition(text)).instances[0]
    assert s.kv_usage_ratio is None and s.requests_running is None and s.requests_waiting == 0


def test_openmetrics_and_text_output_of_one_engine_normalise_alike() -> None:
    from tests.support.synthetic_metrics import demo_engines, vllm_v1_exposition

    engines = demo_engines(2, step=7)
    text = normalise(parse_exposition(vllm_v1_exposition(engines)))
    om_text = vllm_v1_exposition(engines, openmetrics=True)
    assert om_text.rstrip().endswith("# EOF")
    om = normalise(parse_exposition(om_text))
    assert om.dialect == text.dialect == "vllm"
    assert [s.to_dict() for s in om.instances] == [s.to_dict() for s in text.instances]
    assert (
        text.instances[1].prefix_cache_hits_tokens == 1500.0 * 8
        and text.instances[1].kv_capacity_blocks == 8192
    )
