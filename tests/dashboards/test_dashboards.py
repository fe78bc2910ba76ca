"""The generated Grafana dashboards: committed JSON is current, and every query is sound.

"Sound" means free of the mistakes found in published LLM-serving dashboards: counters read
without rate(), quantiles without `sum by (le)`, hard-coded datasource uids, and metric
names the server does not export (a missing `_total`). The metric lists below are written
out independently of the dashboard code, from the exporter's and vLLM's documented names.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from dashboards import lint
from dashboards.generate import JSON_DIR, all_panel_queries, build_all, main, problems, render, stale_files

KVSCOPE_METRICS = {
    "kvscope_target_up",
    "kvscope_scrape_duration_seconds",
    "kvscope_scrape_errors_total",
    "kvscope_kv_usage_ratio",
    "kvscope_kv_capacity_blocks",
    "kvscope_kv_block_size_tokens",
    "kvscope_kv_capacity_tokens",
    "kvscope_prefix_cache_hit_ratio",
    "kvscope_preemptions_per_second",
    "kvscope_requests_running",
    "kvscope_requests_waiting",
    "kvscope_prefix_cache_queries_tokens_total",
    "kvscope_prefix_cache_hits_tokens_total",
    "kvscope_preemptions_total",
    "kvscope_requests_finished_total",
    "kvscope_prompt_tokens_total",
    "kvscope_generation_tokens_total",
    "kvscope_time_to_first_token_seconds",
    "kvscope_inter_token_latency_seconds",
    "kvscope_e2e_request_latency_seconds",
    "kvscope_request_queue_time_seconds",
    "kvscope_advice",
    # the block level (exporter --kv-events) and vLLM's residency histograms (--kv-cache-metrics)
    "kvscope_kv_blocks_stored_total",
    "kvscope_kv_blocks_removed_total",
    "kvscope_kv_first_stores_total",
    "kvscope_kv_capacity_misses_total",
    "kvscope_kv_cached_blocks",
    "kvscope_kv_capacity_miss_distance_blocks",
    "kvscope_prefix_cache_hit_ratio_projected",
    "kvscope_prefill_tokens_saved_per_second",
    "kvscope_kv_hot_prefix_reuse",
    "kvscope_kv_hot_prefix_depth_blocks",
    "kvscope_kv_blocks_on_other_replicas",
    "kvscope_kv_events_problems_total",
    "kvscope_kv_events_batches_total",
    "kvscope_kv_events_replayed_batches_total",
    "kvscope_kv_block_lifetime_seconds",
    "kvscope_kv_block_idle_before_evict_seconds",
    "kvscope_kv_block_reuse_gap_seconds",
}
VLLM_METRICS = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:cache_config_info",
    "up",  # Prometheus' own scrape health
}
KNOWN = {"kvscope-overview": KVSCOPE_METRICS, "vllm-native": VLLM_METRICS}
DASHBOARDS = build_all()
QUERIES = [
    (name, title, expr) for name, model in DASHBOARDS.items() for title, expr in all_panel_queries(model)
]
QUERY_IDS = [f"{name}:{title}:{i}" for i, (name, title, _) in enumerate(QUERIES)]


def test_committed_json_equals_generated_json():
    stale = stale_files()
    assert not stale, f"stale dashboards {stale}: run `python -m dashboards.generate` and commit"


def test_stale_check_notices_a_hand_edit(tmp_path):
    for name, model in DASHBOARDS.items():
        (tmp_path / f"{name}.json").write_text(render(model))
    assert stale_files(tmp_path) == []
    edited = tmp_path / "vllm-native.json"
    edited.write_text(edited.read_text().replace("kvscope / vLLM", "hand edited"))
    assert stale_files(tmp_path) == ["vllm-native.json"]
    assert sorted(p.name for p in JSON_DIR.glob("*.json")) == sorted(f"{n}.json" for n in DASHBOARDS)


def test_generator_check_mode_and_lint_gate(tmp_path, capsys):
    assert main(["--check"]) == 0
    assert main(["--check", "--out", str(tmp_path)]) == 1  # nothing written there yet
    assert "stale" in capsys.readouterr().err
    assert main(["--out", str(tmp_path)]) == 0 and main(["--check", "--out", str(tmp_path)]) == 0
    assert problems(DASHBOARDS) == []
    broken = {
        "x": {
            "panels": [
                {
                    "title": "t",
                    "datasource": "Prometheus",
                    "targets": [{"expr": "sum(vllm:num_preemptions_total)"}],
                }
            ]
        }
    }
    assert len(problems(broken)) == 2


@pytest.mark.parametrize("name", DASHBOARDS)
def test_no_hard_coded_datasource(name):
    model = DASHBOARDS[name]
    assert lint.datasource_problems(model) == []
    panels = [p for p in model["panels"] if p["type"] != "row"]
    assert panels and all(p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for p in panels)
    assert all(t["datasource"]["uid"] == "${datasource}" for p in panels for t in p["targets"])
    assert model["id"] is None and model["uid"] and len(model["uid"]) <= 40


@pytest.mark.parametrize("name", DASHBOARDS)
def test_variables(name):
    variables = {v["name"]: v for v in DASHBOARDS[name]["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    wanted = (
        ["target", "model", "instance"]
        if name == "kvscope-overview"
        else ["model_name", "instance", "engine"]
    )
    for var in wanted:
        assert variables[var]["type"] == "query"
        assert variables[var]["query"].startswith("label_values(")
        assert variables[var]["datasource"]["uid"] == "${datasource}"
        assert variables[var]["allValue"] == ".*"


@pytest.mark.parametrize(("name", "title", "expr"), QUERIES, ids=QUERY_IDS)
def test_counters_are_rated(name, title, expr):
    assert lint.counter_problems(expr) == []


@pytest.mark.parametrize(("name", "title", "expr"), QUERIES, ids=QUERY_IDS)
def test_quantiles_sum_by_le(name, title, expr):
    assert lint.quantile_problems(expr) == []
    if "histogram_quantile" in expr:
        assert re.search(r"histogram_quantile\([\d.]+, sum by \(le, ", expr)


@pytest.mark.parametrize(("name", "title", "expr"), QUERIES, ids=QUERY_IDS)
def test_only_exported_metric_names(name, title, expr):
    assert lint.unknown_metrics(expr, KNOWN[name]) == []


def test_lint_catches_the_published_mistakes():
    """Each rule rejects a real mistake found in a published dashboard or alert rule."""
    lifetime = 'sum(vllm:prefix_cache_hits_total{m="x"}) / sum(vllm:prefix_cache_queries_total{m="x"})'
    assert len(lint.counter_problems(lifetime)) == 2
    assert lint.counter_problems("delta(vllm:prefix_cache_hits_total[5m])")
    assert lint.quantile_problems(
        "histogram_quantile(0.99, rate(vllm:time_to_first_token_seconds_bucket[5m]))"
    )
    assert lint.unknown_metrics('rate(vllm:num_preemptions{a="b"}[5m])', VLLM_METRICS)
    assert lint.datasource_problems(
        {"panels": [{"datasource": {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}}]}
    )
    assert lint.datasource_problems({"panels": [{"datasource": "Prometheus"}]})


def test_overview_covers_the_issue_panels():
    overview = DASHBOARDS["kvscope-overview"]
    exprs = "\n".join(expr for _, expr in all_panel_queries(overview))
    titles = {p["title"] for p in overview["panels"]}
    for title in (
        "KV cache usage",
        "KV capacity",
        "Running and waiting requests",
        "Preemptions per second",
        "Preemptions per finished request",
        "Prefix cache hit ratio",
        "Time to first token",
        "Inter-token latency",
        "End-to-end request latency",
        "Token throughput",
        "Target up",
        "Live advice",
    ):
        assert title in titles
    assert re.search(
        r"rate\(kvscope_preemptions_total\{[^}]*\}\[\$__rate_interval\]\)\) / \(sum by \([^)]*\) "
        r"\(rate\(kvscope_requests_finished_total",
        exprs,
    )
    for histogram in ("time_to_first_token", "inter_token_latency", "e2e_request_latency"):
        for q in ("0.5", "0.95", "0.99"):
            assert (
                f"histogram_quantile({q}, sum by (le, target, model) (rate(kvscope_{histogram}_seconds_bucket"
                in exprs
            )
    usage = next(p for p in overview["panels"] if p["title"] == "KV cache usage")
    steps = [s["value"] for s in usage["fieldConfig"]["defaults"]["thresholds"]["steps"]]
    assert steps == [None, 0.9, 0.98]


def test_layout_is_on_the_grid():
    for model in DASHBOARDS.values():
        ids = [p["id"] for p in model["panels"]]
        assert len(ids) == len(set(ids))
        for panel in model["panels"]:
            pos = panel["gridPos"]
            assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24 and pos["h"] > 0
            assert panel["type"] == "row" or panel["description"]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_every_panel_query_parses_as_promql(tmp_path):
    """promtool parses each query (Grafana's variables replaced by values), so a syntax
    error fails here rather than as a red triangle in Grafana."""
    rules = [
        {
            "record": f"kvscope_dashboard_check:q{i}",
            "expr": re.sub(r"\$\w+", ".*", expr.replace("$__rate_interval", "1m")),
        }
        for i, (_, _, expr) in enumerate(QUERIES)
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panel-queries", "rules": rules}]}))
    result = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(rules)} rules found" in result.stdout
