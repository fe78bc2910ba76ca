"""The kvscope overview dashboard, on the exporter's canonical `kvscope_*` metrics.

One dashboard for every engine the exporter understands (vLLM, SGLang, TensorRT-LLM, TGI,
llama.cpp, the reference engine): the exporter has already mapped each dialect to the same
names, so the panels answer the operator's question — is the KV cache the bottleneck, and
what should change — without per-engine queries. Panels follow the question's order: how
full is the cache and how big is it, is the scheduler preempting because of it, is the
prefix cache doing its job, what do users feel (latency), which blocks are reused and
what more blocks would give (KV events, `kvscope_kv_events`), and what the exporter advises.
"""

from __future__ import annotations

from dashboards.kvscope_kv_events import block_residency, kv_events
from dashboards.layout import Layout, add_quantile_panels, dashboard, datasource_variable, label_variable
from dashboards.panels import (
    JSON,
    KV_USAGE,
    PER_S,
    PREEMPTION_RATE,
    PREEMPTION_SHARE,
    TOKENS_PER_S,
    field_mappings,
    query,
    stat,
    table,
    thresholds,
    timeseries,
    value_mappings,
)
from dashboards.promql import Promql

UID = "kvscope-overview"
SERIES = "target, model, instance"
LEGEND = "{{target}} {{model}} {{instance}}"
SELECTOR = 'target=~"$target", model=~"$model", instance=~"$instance"'
# kvscope_target_up and the scrape metrics carry only `target`: filtering them by
# $model or $instance would hide every series.
TARGET_ONLY = Promql('target=~"$target"', by="target")

# Display text for each action of kvscope_advice, in the advisor's words.
ADVICE_TEXT = {
    "quantize_kv_cache": ("Quantize the KV cache (fp8/int8): about 2x the tokens", "orange"),
    "cut_context": ("Cut the context limit (max_model_len) to what requests use", "orange"),
    "add_memory": ("Add memory: a larger GPU, more tensor parallelism or replicas", "red"),
    "raise_memory_utilization": ("Raise gpu_memory_utilization: headroom is unused", "orange"),
    "make_prefix_identical": ("Make shared prompt prefixes byte-identical", "yellow"),
    "kv_not_bottleneck": ("KV cache is not the bottleneck", "green"),
}


def _variables() -> list[JSON]:
    # model/instance are listed from kvscope_requests_running, the one gauge every
    # dialect provides (KV usage is missing for engines such as recent llama.cpp).
    return [
        datasource_variable(),
        label_variable("target", "target", "kvscope_target_up"),
        label_variable("model", "model", "kvscope_requests_running", 'target=~"$target"'),
        label_variable(
            "instance", "instance", "kvscope_requests_running", 'target=~"$target", model=~"$model"'
        ),
    ]


def _kv_cache(layout: Layout, q: Promql) -> None:
    layout.row("KV cache")
    layout.add(
        stat(
            "KV cache usage (max)",
            "Highest KV-cache block usage over the selected engines, 0-1. Orange from 90 %, red from "
            "98 %: near 100 % is normal under load, but sustained 98 % means new requests wait for "
            "blocks and running ones get preempted.\n\nMetric: `kvscope_kv_usage_ratio`",
            [query(f"max({q.sel('kvscope_kv_usage_ratio')})", "max")],
            unit="percentunit",
            steps=KV_USAGE,
            max_value=1,
        ),
        w=4,
    )
    layout.add(
        timeseries(
            "KV cache usage",
            "Fraction of KV-cache blocks held by requests, per engine. Engines count evictable "
            "prefix-cache blocks as free, so this is pressure from live requests.\n\n"
            "Metric: `kvscope_kv_usage_ratio`",
            [query(q.gauge("max", "kvscope_kv_usage_ratio"), LEGEND)],
            unit="percentunit",
            max_value=1,
            steps=KV_USAGE,
        ),
        w=12,
    )
    layout.add(
        table(
            "KV capacity",
            "The KV pool each engine allocated at start-up: blocks x block size = tokens. Divide by "
            "a typical request's prompt + output tokens for the concurrency that fits without "
            "preemption.\n\nMetrics: `kvscope_kv_capacity_tokens`, `kvscope_kv_capacity_blocks`, "
            "`kvscope_kv_block_size_tokens`",
            [
                query(q.gauge("max", m), instant=True, fmt="table")
                for m in (
                    "kvscope_kv_capacity_tokens",
                    "kvscope_kv_capacity_blocks",
                    "kvscope_kv_block_size_tokens",
                )
            ],
            transformations=[{"id": "merge", "options": {}}],
            rename={"Value #A": "capacity (tokens)", "Value #B": "blocks", "Value #C": "block size (tokens)"},
            no_value="Capacity not reported by this engine",
        ),
        w=8,
    )


def _scheduler(layout: Layout, q: Promql) -> None:
    layout.row("Scheduler and preemption")
    layout.add(
        timeseries(
            "Running and waiting requests",
            "Requests in the running batch and in the waiting queue. Waiting requests with KV usage "
            "near 100 % are waiting for KV blocks; waiting with low KV usage points elsewhere "
            "(max_num_seqs, token budget, compute).\n\n"
            "Metrics: `kvscope_requests_running`, `kvscope_requests_waiting`",
            [
                query(q.gauge("sum", "kvscope_requests_running"), f"running · {LEGEND}"),
                query(q.gauge("sum", "kvscope_requests_waiting"), f"waiting · {LEGEND}"),
            ],
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Preemptions per second",
            "Running requests evicted to free KV blocks (recompute: their prefill is redone later). "
            "Sustained preemption means the KV cache is too small for the load.\n\n"
            "Metric: `rate(kvscope_preemptions_total)`",
            [query(q.sum_rate("kvscope_preemptions_total"), LEGEND)],
            unit=PER_S,
            steps=PREEMPTION_RATE,
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Preemptions per finished request",
            "Preemptions divided by finished requests over the same window: a load-independent "
            "measure of how much work is thrown away. Below 0.01 is occasional; above 0.05 act.\n\n"
            "Metrics: `rate(kvscope_preemptions_total) / rate(kvscope_requests_finished_total)`",
            [query(q.ratio("kvscope_preemptions_total", "kvscope_requests_finished_total"), LEGEND)],
            steps=PREEMPTION_SHARE,
        ),
        w=8,
    )


def _prefix_cache(layout: Layout, q: Promql) -> None:
    layout.row("Prefix cache")
    layout.add(
        timeseries(
            "Prefix cache hit ratio",
            "Share of looked-up prompt tokens served from the prefix cache, from the rates of the "
            "token counters over the panel's window (not lifetime totals). Low while prompts share "
            "a prefix usually means the prefixes differ in a byte (timestamps, ids) before the "
            "shared part.\n\nMetrics: `kvscope_prefix_cache_hits_tokens_total`, "
            "`kvscope_prefix_cache_queries_tokens_total`",
            [
                query(
                    q.ratio(
                        "kvscope_prefix_cache_hits_tokens_total", "kvscope_prefix_cache_queries_tokens_total"
                    ),
                    LEGEND,
                )
            ],
            unit="percentunit",
            max_value=1,
        ),
        w=12,
    )
    layout.add(
        timeseries(
            "Prefix cache tokens per second",
            "Prompt tokens looked up in the prefix cache and tokens found there.\n\n"
            "Metrics: `kvscope_prefix_cache_queries_tokens_total`, `kvscope_prefix_cache_hits_tokens_total`",
            [
                query(q.sum_rate("kvscope_prefix_cache_queries_tokens_total"), f"queried · {LEGEND}"),
                query(q.sum_rate("kvscope_prefix_cache_hits_tokens_total"), f"hit · {LEGEND}"),
            ],
            unit=TOKENS_PER_S,
        ),
        w=12,
    )


def _latency(layout: Layout, q: Promql) -> None:
    layout.row("Latency")
    histograms = (
        (
            "Time to first token",
            "kvscope_time_to_first_token_seconds",
            "Queueing, prefill and the first decode step. Preemption shows up here as p99 spikes.",
        ),
        (
            "Inter-token latency",
            "kvscope_inter_token_latency_seconds",
            "Gap between streamed tokens; grows with batch size and with re-prefills after preemption.",
        ),
        ("End-to-end request latency", "kvscope_e2e_request_latency_seconds", "Arrival to last token."),
        (
            "Queue time",
            "kvscope_request_queue_time_seconds",
            "Time waiting before the first schedule; grows when the KV pool is full.",
        ),
    )
    add_quantile_panels(layout, q, histograms, w=12)


def _throughput(layout: Layout, q: Promql) -> None:
    layout.row("Throughput")
    layout.add(
        timeseries(
            "Token throughput",
            "Prompt tokens (including prefix-cache hits) and generated tokens per second.\n\n"
            "Metrics: `kvscope_prompt_tokens_total`, `kvscope_generation_tokens_total`",
            [
                query(q.sum_rate("kvscope_prompt_tokens_total"), f"prompt · {LEGEND}"),
                query(q.sum_rate("kvscope_generation_tokens_total"), f"generation · {LEGEND}"),
            ],
            unit=TOKENS_PER_S,
        ),
        w=12,
    )
    layout.add(
        timeseries(
            "Finished requests per second",
            "Requests finished per second, for any reason.\n\nMetric: `kvscope_requests_finished_total`",
            [query(q.sum_rate("kvscope_requests_finished_total"), LEGEND)],
            unit="reqps",
        ),
        w=12,
    )


def _advice_and_exporter(layout: Layout, q: Promql) -> None:
    layout.row("Live advice and exporter health")
    layout.add(
        table(
            "Live advice",
            "What the exporter's diagnosis rules advise now, from a window of recent samples "
            "(saturation, persistent preemption, prefix hit ratio). `kvscope report` adds workload "
            "evidence and what-if replays after a run.\n\nMetric: `kvscope_advice`",
            [
                query(
                    f"{q.gauge('max', 'kvscope_advice', by=SERIES + ', action')} == 1",
                    instant=True,
                    fmt="table",
                )
            ],
            hide=("Time", "Value"),
            overrides=[field_mappings("action", ADVICE_TEXT)],
            no_value="No advice yet",
        ),
        w=12,
    )
    layout.add(
        stat(
            "Target up",
            "Whether the exporter's last scrape of each engine succeeded. When the exporter itself "
            "is down these disappear; Prometheus' own `up` covers that.\n\nMetric: `kvscope_target_up`",
            [query(TARGET_ONLY.gauge("max", "kvscope_target_up"), "{{target}}")],
            steps=thresholds(("red", None), ("green", 1)),
            mappings=value_mappings({"0": ("DOWN", "red"), "1": ("UP", "green")}),
        ),
        w=4,
    )
    layout.add(
        timeseries(
            "Scrape duration",
            "How long the exporter's scrape of each engine's /metrics takes.\n\n"
            "Metric: `kvscope_scrape_duration_seconds`",
            [query(TARGET_ONLY.gauge("max", "kvscope_scrape_duration_seconds"), "{{target}}")],
            unit="s",
        ),
        w=4,
    )
    layout.add(
        timeseries(
            "Scrape errors per second",
            "Failed scrapes by reason (timeout, HTTP status, parse, size cap).\n\n"
            "Metric: `kvscope_scrape_errors_total`",
            [
                query(
                    TARGET_ONLY.sum_rate("kvscope_scrape_errors_total", by="target, reason"),
                    "{{target}} {{reason}}",
                )
            ],
            unit=PER_S,
        ),
        w=4,
    )


def build() -> JSON:
    """The overview dashboard model, freshly built (deterministic: same input, same JSON)."""
    q = Promql(SELECTOR, by=SERIES)
    layout = Layout()
    for section in (_kv_cache, _scheduler, _prefix_cache, _latency, _throughput):
        section(layout, q)
    kv_events(layout)
    block_residency(layout, q)
    _advice_and_exporter(layout, q)
    return dashboard(
        uid=UID,
        title="kvscope / Overview",
        description="KV-cache pressure, preemption, prefix reuse, latency and live advice for "
        "paged LLM servers, on the kvscope exporter's canonical metrics.",
        tags=["kvscope", "llm", "kv-cache"],
        layout=layout,
        variables=_variables(),
    )
