"""The shipped scrape config, alert rules and every panel query, on a real Prometheus.

Two prometheus_client registries stand in for the scrape targets: one exposes the
exporter's canonical kvscope_* names with their documented labels, the other vLLM V1's
names, served by the same library vLLM and the reference engine use. A real Prometheus
(Debian package) scrapes both with dashboards/prometheus/prometheus.yml (targets and
intervals swapped for the test), and then

- every panel query of both dashboards returns data (Grafana's `$__rate_interval` and
  variables replaced by values), and every template variable lists a value;
- the kvscope series keep the engine's `instance` label (`honor_labels`);
- vLLM names keep their colon although prometheus_client writes `vllm_` when Prometheus 2
  negotiates OpenMetrics (client_python#1177), thanks to the job's relabel rule;
- Prometheus loads alerts.yml.

The end-to-end test with the real exporter and engine under load supersedes the fake
targets; this one pins the config and query shapes on which that test relies.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
import urllib.request
from contextlib import contextmanager

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from dashboards.generate import all_panel_queries, build_all
from tests.support.paths import ROOT
from tests.support.prometheus import query, shipped_prometheus

PROM_DIR = ROOT / "dashboards" / "prometheus"
LABELS = ("target", "model", "instance")
SERIES = ("engine-a", "tiny-llama", "gpu0")
BUCKETS = (0.01, 0.1, 1.0, 10.0)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed"),
]


def exporter_registry() -> tuple[CollectorRegistry, callable]:
    """The canonical kvscope_* families, and a function that moves them along."""
    reg = CollectorRegistry()
    gauges = [
        Gauge(n, n, LABELS, registry=reg)
        for n in (
            "kvscope_kv_usage_ratio",
            "kvscope_kv_capacity_blocks",
            "kvscope_kv_block_size_tokens",
            "kvscope_kv_capacity_tokens",
            "kvscope_prefix_cache_hit_ratio",
            "kvscope_preemptions_per_second",
            "kvscope_requests_running",
            "kvscope_requests_waiting",
        )
    ]
    counters = [
        Counter(n, n, LABELS, registry=reg)
        for n in (
            "kvscope_prefix_cache_queries_tokens",
            "kvscope_prefix_cache_hits_tokens",
            "kvscope_preemptions",
            "kvscope_requests_finished",
            "kvscope_prompt_tokens",
            "kvscope_generation_tokens",
        )
    ]
    histograms = [
        Histogram(n, n, LABELS, buckets=BUCKETS, registry=reg)
        for n in (
            "kvscope_time_to_first_token_seconds",
            "kvscope_inter_token_latency_seconds",
            "kvscope_e2e_request_latency_seconds",
            "kvscope_request_queue_time_seconds",
            "kvscope_kv_block_lifetime_seconds",
            "kvscope_kv_block_idle_before_evict_seconds",
            "kvscope_kv_block_reuse_gap_seconds",
        )
    ]
    kv = kv_event_families(reg)
    up = Gauge("kvscope_target_up", "up", ["target"], registry=reg)
    duration = Gauge("kvscope_scrape_duration_seconds", "duration", ["target"], registry=reg)
    errors = Counter("kvscope_scrape_errors", "errors", ["target", "reason"], registry=reg)
    advice = Gauge("kvscope_advice", "advice", [*LABELS, "action"], registry=reg)

    def tick(i: int) -> None:
        for g in gauges:
            g.labels(*SERIES).set(0.5 + (i % 10) / 100)
        for c in counters:
            c.labels(*SERIES).inc(7)
        for h in histograms:
            h.labels(*SERIES).observe(0.05 * (1 + i % 5))
        up.labels(SERIES[0]).set(1)
        duration.labels(SERIES[0]).set(0.004)
        errors.labels(SERIES[0], "timeout").inc()
        advice.labels(*SERIES, "add_memory").set(1)
        advice.labels(*SERIES, "cut_context").set(0)
        kv(i)

    return reg, tick


def kv_event_families(reg: CollectorRegistry) -> callable:
    """The kvscope_kv_* families of `--kv-events`, labelled as exporter/METRICS.md says
    (target, instance [, medium | pool_increase | rank | reason]: no model)."""
    target, instance = SERIES[0], SERIES[2]
    tier = ("target", "instance", "medium")
    counters = [
        Counter(n, n, tier, registry=reg)
        for n in (
            "kvscope_kv_blocks_stored",
            "kvscope_kv_blocks_removed",
            "kvscope_kv_first_stores",
            "kvscope_kv_capacity_misses",
        )
    ]
    cached = Gauge("kvscope_kv_cached_blocks", "cached", tier, registry=reg)
    distance = Histogram(
        "kvscope_kv_capacity_miss_distance_blocks", "d", tier, buckets=(1, 4, 16, 64), registry=reg
    )
    curve = [
        Gauge(n, n, ("target", "instance", "pool_increase"), registry=reg)
        for n in ("kvscope_prefix_cache_hit_ratio_projected", "kvscope_prefill_tokens_saved_per_second")
    ]
    chains = [
        Gauge(n, n, ("target", "instance", "rank"), registry=reg)
        for n in ("kvscope_kv_hot_prefix_reuse", "kvscope_kv_hot_prefix_depth_blocks")
    ]
    shared = Gauge("kvscope_kv_blocks_on_other_replicas", "shared", ("target", "instance"), registry=reg)
    per_source = [
        Counter(n, n, ("target",), registry=reg)
        for n in ("kvscope_kv_events_batches", "kvscope_kv_events_replayed_batches")
    ]
    problems = Counter("kvscope_kv_events_problems", "problems", ("target", "reason"), registry=reg)

    def tick(i: int) -> None:
        for c in counters:
            c.labels(target, instance, "GPU").inc(3)
        cached.labels(target, instance, "GPU").set(40 + i % 5)
        distance.labels(target, instance, "GPU").observe(1 + i % 30)
        for g in curve:
            g.labels(target, instance, "0.5").set(0.6)
        for g in chains:
            g.labels(target, instance, "1").set(8)
        shared.labels(target, instance).set(0)
        for c in per_source:
            c.labels(target).inc()
        problems.labels(target, "gap").inc()

    return tick


def engine_registry() -> tuple[CollectorRegistry, callable]:
    """vLLM V1's names and labels, as the reference engine exposes them."""
    reg = CollectorRegistry()
    labels = ("model_name", "engine")
    gauges = [
        Gauge(n, n, labels, registry=reg)
        for n in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
    ]
    counters = [
        Counter(n, n, labels, registry=reg)
        for n in (
            "vllm:prefix_cache_queries",
            "vllm:prefix_cache_hits",
            "vllm:num_preemptions",
            "vllm:prompt_tokens",
            "vllm:generation_tokens",
        )
    ]
    success = Counter("vllm:request_success", "finished", [*labels, "finished_reason"], registry=reg)
    histograms = [
        Histogram(n, n, labels, buckets=BUCKETS, registry=reg)
        for n in (
            "vllm:time_to_first_token_seconds",
            "vllm:inter_token_latency_seconds",
            "vllm:e2e_request_latency_seconds",
            "vllm:request_queue_time_seconds",
        )
    ]
    info = Gauge(
        "vllm:cache_config_info",
        "config",
        [
            "engine",
            "block_size",
            "num_gpu_blocks",
            "cache_dtype",
            "enable_prefix_caching",
            "gpu_memory_utilization",
        ],
        registry=reg,
    )
    info.labels("0", "16", "64", "auto", "True", "0.9").set(1)

    def tick(i: int) -> None:
        for g in gauges:
            g.labels("tiny-llama", "0").set(0.25 + (i % 10) / 100)
        for c in counters:
            c.labels("tiny-llama", "0").inc(5)
        success.labels("tiny-llama", "0", "stop").inc()
        for h in histograms:
            h.labels("tiny-llama", "0").observe(0.02 * (1 + i % 5))

    return reg, tick


@contextmanager
def serving(*registries_and_ticks):
    """Serve each registry on its own port; tick all of them every 0.2 s in a thread."""
    servers = [start_http_server(0, addr="127.0.0.1", registry=reg)[0] for reg, _ in registries_and_ticks]
    stop = threading.Event()

    def loop() -> None:
        i = 0
        while not stop.is_set():
            for _, tick in registries_and_ticks:
                tick(i)
            i += 1
            stop.wait(0.2)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield [server.server_port for server in servers]
    finally:
        stop.set()
        thread.join(timeout=5)
        for server in servers:
            server.shutdown()
            server.server_close()


def rule_names(base: str) -> set[str]:
    with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=10) as response:
        groups = json.load(response)["data"]["groups"]
    return {rule["name"] for group in groups for rule in group["rules"]}


def grafana_to_promql(expr: str) -> str:
    """What Grafana sends: variables set to "All" (`.*`), $__rate_interval >= 4 scrapes."""
    return re.sub(r"\$\w+", ".*", expr.replace("$__rate_interval", "5s"))


def test_every_panel_query_returns_data_from_real_prometheus(tmp_path):
    dashboards = build_all()
    queries = {
        (name, title, grafana_to_promql(expr))
        for name, model in dashboards.items()
        for title, expr in all_panel_queries(model)
    }
    with (
        serving(exporter_registry(), engine_registry()) as (exporter_port, engine_port),
        shipped_prometheus(tmp_path, exporter_port, engine_port) as base,
    ):
        pending = set(queries)
        deadline = time.monotonic() + 45
        while pending and time.monotonic() < deadline:
            pending = {q for q in pending if not query(base, q[2])}
            time.sleep(1)
        assert not pending, "no data: " + "\n".join(f"{n} / {t}: {e}" for n, t, e in sorted(pending))

        for name, model in dashboards.items():
            for var in model["templating"]["list"]:
                if var["type"] != "query":
                    continue
                metric, label = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"]).groups()
                found = query(base, f"count by ({label}) ({grafana_to_promql(metric)})")
                assert any(r["metric"].get(label) for r in found), f"{name}: ${var['name']} lists nothing"

        usage = query(base, "kvscope_kv_usage_ratio")
        assert [r["metric"]["instance"] for r in usage] == ["gpu0"]  # honor_labels kept it
        assert query(base, "vllm:num_requests_running")
        assert not query(base, '{__name__=~"vllm_.+"}')

        assert {
            "KvscopeKVCacheSaturated",
            "KvscopePersistentPreemption",
            "KvscopeLowPrefixHitRatio",
            "KvscopeTargetDown",
            "KvscopeExporterDown",
        } <= rule_names(base)
