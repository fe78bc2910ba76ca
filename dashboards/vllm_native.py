"""A dashboard on vLLM's own (V1) metric names, for users who do not run the exporter.

It covers what the published vLLM dashboards miss or get wrong — KV capacity in tokens,
preemptions per finished request, a windowed prefix hit ratio, quantiles over
`sum by (le)` — on exactly the names vLLM >= 0.9.2 exposes (and the bundled reference
engine copies). Without the exporter there is no live advice and no other engine.
"""

from __future__ import annotations

from dashboards.layout import Layout, dashboard, datasource_variable, label_variable
from dashboards.panels import (
    JSON,
    KV_USAGE,
    PER_S,
    PREEMPTION_RATE,
    PREEMPTION_SHARE,
    TOKENS_PER_S,
    latency,
    query,
    stat,
    table,
    thresholds,
    timeseries,
    value_mappings,
)
from dashboards.promql import Promql

UID = "kvscope-vllm-native"
SERIES = "model_name, instance, engine"
LEGEND = "{{model_name}} {{instance}} engine {{engine}}"
SELECTOR = 'model_name=~"$model_name", instance=~"$instance", engine=~"$engine"'
# vllm:cache_config_info carries the engine index and the config, but not model_name.
CONFIG_SELECTOR = 'instance=~"$instance", engine=~"$engine"'
CONFIG_LABELS = (
    "instance, engine, num_gpu_blocks, block_size, cache_dtype, enable_prefix_caching, gpu_memory_utilization"
)


def _variables() -> list[JSON]:
    running = "vllm:num_requests_running"
    return [
        datasource_variable(),
        label_variable("model_name", "model_name", running),
        label_variable("instance", "instance", running, 'model_name=~"$model_name"'),
        label_variable("engine", "engine", running, 'model_name=~"$model_name", instance=~"$instance"'),
    ]


def _capacity_table() -> JSON:
    """KV capacity from the info metric's labels: Grafana multiplies num_gpu_blocks by
    block_size, since PromQL cannot turn label values into numbers."""
    expr = f"max by ({CONFIG_LABELS}) (vllm:cache_config_info{{{CONFIG_SELECTOR}}})"
    numeric = [{"targetField": f, "destinationType": "number"} for f in ("num_gpu_blocks", "block_size")]
    return table(
        "KV cache configuration and capacity",
        "The resolved cache configuration of each engine. capacity (tokens) = num_gpu_blocks x "
        'block_size. Early V1 builds report num_gpu_blocks="None".\n\nMetric: `vllm:cache_config_info`',
        [query(expr, instant=True, fmt="table")],
        hide=("Time", "Value"),
        transformations=[
            {"id": "convertFieldType", "options": {"conversions": numeric, "fields": {}}},
            {
                "id": "calculateField",
                "options": {
                    "alias": "capacity (tokens)",
                    "mode": "binary",
                    "replaceFields": False,
                    "binary": {"left": "num_gpu_blocks", "operator": "*", "right": "block_size"},
                },
            },
        ],
    )


def _kv_and_scheduler(layout: Layout, q: Promql) -> None:
    layout.row("KV cache")
    layout.add(
        stat(
            "KV cache usage (max)",
            "Highest KV-cache block usage over the selected engines (vLLM reports 0-1 despite "
            "the `_perc` name). Orange from 90 %, red from 98 %.\n\nMetric: `vllm:kv_cache_usage_perc`",
            [query(f"max({q.sel('vllm:kv_cache_usage_perc')})", "max")],
            unit="percentunit",
            steps=KV_USAGE,
            max_value=1,
        ),
        w=4,
    )
    layout.add(
        timeseries(
            "KV cache usage",
            "Fraction of KV blocks held by requests, per engine; evictable prefix-cache blocks "
            "count as free.\n\nMetric: `vllm:kv_cache_usage_perc`",
            [query(q.gauge("max", "vllm:kv_cache_usage_perc"), LEGEND)],
            unit="percentunit",
            max_value=1,
            steps=KV_USAGE,
        ),
        w=10,
    )
    layout.add(_capacity_table(), w=10)

    layout.row("Scheduler and preemption")
    layout.add(
        timeseries(
            "Running and waiting requests",
            "Metrics: `vllm:num_requests_running`, `vllm:num_requests_waiting`",
            [
                query(q.gauge("sum", "vllm:num_requests_running"), f"running · {LEGEND}"),
                query(q.gauge("sum", "vllm:num_requests_waiting"), f"waiting · {LEGEND}"),
            ],
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Preemptions per second",
            "Recompute preemptions: a running request loses its KV blocks and is prefilled again "
            "later. Note the `_total`: `vllm:num_preemptions` (without it) returns nothing.\n\n"
            "Metric: `vllm:num_preemptions_total`",
            [query(q.sum_rate("vllm:num_preemptions_total"), LEGEND)],
            unit=PER_S,
            steps=PREEMPTION_RATE,
        ),
        w=8,
    )
    layout.add(
        timeseries(
            "Preemptions per finished request",
            "Preemptions per finished request over the same window. Below 0.01 is occasional; above "
            "0.05 act.\n\nMetrics: `vllm:num_preemptions_total`, `vllm:request_success_total`",
            [query(q.ratio("vllm:num_preemptions_total", "vllm:request_success_total"), LEGEND)],
            steps=PREEMPTION_SHARE,
        ),
        w=8,
    )


def _prefix_and_latency(layout: Layout, q: Promql) -> None:
    layout.row("Prefix cache")
    layout.add(
        timeseries(
            "Prefix cache hit ratio",
            "Hit tokens / queried tokens, from counter rates over the panel's window (a ratio of the "
            "raw counters would be a lifetime average).\n\n"
            "Metrics: `vllm:prefix_cache_hits_total`, `vllm:prefix_cache_queries_total`",
            [query(q.ratio("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"), LEGEND)],
            unit="percentunit",
            max_value=1,
        ),
        w=12,
    )
    layout.add(
        timeseries(
            "Prefix cache tokens per second",
            "Metrics: `vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total`",
            [
                query(q.sum_rate("vllm:prefix_cache_queries_total"), f"queried · {LEGEND}"),
                query(q.sum_rate("vllm:prefix_cache_hits_total"), f"hit · {LEGEND}"),
            ],
            unit=TOKENS_PER_S,
        ),
        w=12,
    )

    layout.row("Latency")
    per_model = Promql(q.selector, by="model_name")
    for title, histogram in (
        ("Time to first token", "vllm:time_to_first_token_seconds"),
        ("Inter-token latency", "vllm:inter_token_latency_seconds"),
        ("End-to-end request latency", "vllm:e2e_request_latency_seconds"),
        ("Queue time", "vllm:request_queue_time_seconds"),
    ):
        layout.add(
            latency(
                title, f"Metric: `{histogram}`", per_model.latency_quantiles(histogram), "{{model_name}}"
            ),
            w=12,
        )


def _throughput(layout: Layout, q: Promql) -> None:
    layout.row("Throughput and targets")
    layout.add(
        timeseries(
            "Token throughput",
            "Metrics: `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`",
            [
                query(q.sum_rate("vllm:prompt_tokens_total"), f"prompt · {LEGEND}"),
                query(q.sum_rate("vllm:generation_tokens_total"), f"generation · {LEGEND}"),
            ],
            unit=TOKENS_PER_S,
        ),
        w=10,
    )
    layout.add(
        timeseries(
            "Finished requests by reason",
            "stop / length / abort (and error on newer builds).\n\nMetric: `vllm:request_success_total`",
            [
                query(
                    q.sum_rate("vllm:request_success_total", by="model_name, finished_reason"),
                    "{{model_name}} {{finished_reason}}",
                )
            ],
            unit="reqps",
        ),
        w=10,
    )
    layout.add(
        stat(
            "Scrape target up",
            "Prometheus' own scrape health of the vLLM servers.\n\nMetric: `up`",
            [query('max by (instance) (up{instance=~"$instance"})', "{{instance}}")],
            steps=thresholds(("red", None), ("green", 1)),
            mappings=value_mappings({"0": ("DOWN", "red"), "1": ("UP", "green")}),
        ),
        w=4,
    )


def build() -> JSON:
    """The vLLM-native dashboard model, freshly built."""
    q = Promql(SELECTOR, by=SERIES)
    layout = Layout()
    for section in (_kv_and_scheduler, _prefix_and_latency, _throughput):
        section(layout, q)
    return dashboard(
        uid=UID,
        title="kvscope / vLLM (native metrics)",
        description="KV cache, preemption, prefix reuse and latency on vLLM V1's own metric "
        "names, for servers watched without the kvscope exporter.",
        tags=["kvscope", "vllm", "llm", "kv-cache"],
        layout=layout,
        variables=_variables(),
    )
