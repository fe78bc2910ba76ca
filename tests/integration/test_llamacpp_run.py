"""`kvscope run` against a real llama.cpp `llama-server` (tests/support/llama_server: 4 slots,
SmolLM2), the acceptance of llama.cpp as a first-class target: the shared-prefix workload for
the acceptance's 60 s with keep-alive, then the bundle, `kvscope exporter inspect` on the live
/metrics and `kvscope advise` are checked against what the server itself says. Without
calibration, so the server's counters read before and after the run hold the measured
requests only (the run's figures leave the calibration probes out by design)."""

from __future__ import annotations

import json
import subprocess

import pytest

from exporter.dialects import normalise
from exporter.parse import parse_exposition
from harness.bundle.finding import codes
from harness.results import load
from harness.run.commands import kvscope_command
from tests.support.llama_server import llama_server
from tests.support.paths import ROOT
from tests.support.servers import kvscope_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]
SLOTS, SLOT_CONTEXT = 4, 2048  # -np 4 over the 8,192-token context


def prefix_counters(metrics: str) -> tuple[float, float]:
    """(cached, computed) prompt tokens: llamacpp:prompt_tokens_cached_total, _total."""
    rows = parse_exposition(metrics).samples
    return rows["llamacpp:prompt_tokens_cached_total"][0][1], rows["llamacpp:prompt_tokens_total"][0][1]


def kvscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(kvscope_command(*args), capture_output=True, text=True, timeout=240, cwd=ROOT)


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("llama")
    with llama_server(tmp) as server:
        before = prefix_counters(server.metrics())
        rc, log, _ = kvscope_run(
            "--target", server.url, "--workload", "shared_prefix", "--users", str(SLOTS),
            "--duration", "60s", "--prefix-tokens", "64", "--suffix-tokens", "4", "--output-tokens", "6",
            "--no-calibrate", "--out", str(tmp / "b"), timeout_s=300,
        )  # fmt: skip
        assert rc == 0, log
        after = prefix_counters(server.metrics())
        inspect = kvscope("exporter", "inspect", server.url + "/metrics", "--json")
        assert inspect.returncode == 0, inspect.stderr
        yield server, load(tmp / "b"), before, after, json.loads(inspect.stdout), log


def test_the_runs_prefix_hit_ratio_is_the_servers_counters(llama_run):
    _, bundle, (cached0, computed0), (cached1, computed1), _, _ = llama_run
    cached, computed = cached1 - cached0, computed1 - computed0
    assert cached > 0 and computed > 0
    assert bundle.summary["server"]["prefix_hit_ratio"] == cached / (cached + computed)


def test_kv_usage_is_a_ratio_that_moves_while_requests_run(llama_run):
    server = load_server(llama_run)
    usage = server["kv_usage_ratio"].dropna()
    assert len(usage) >= 0.9 * len(server) and ((usage >= 0) & (usage <= 1)).all()
    running = server[server["requests_running"] > 0]
    assert len(running) > 20 and (running["kv_usage_ratio"] > 0).mean() >= 0.95, running
    assert (server["kv_capacity_tokens"].dropna() == SLOTS * SLOT_CONTEXT).all()


def load_server(llama_run):
    return llama_run[1].server.sort_values("time_unix").iloc[1:]  # the first scrape precedes the probe


def test_every_request_carries_the_servers_timings(llama_run):
    server, bundle, _, _, _, log = llama_run
    requests = bundle.requests
    ok = requests[requests["ok"]]
    measured = ok[ok["phase"] == "measure"]
    assert len(measured) >= 200 and len(ok) == len(requests), requests["error_class"].value_counts()
    assert ok["server_prefill_time_s"].notna().all() and ok["server_decode_time_s"].notna().all()
    assert (ok["ttft_s"] >= ok["server_prefill_time_s"]).all()
    assert ok["server_queue_time_s"].isna().all()  # llama.cpp does not report it
    assert (ok["server_cached_prompt_tokens"] <= ok["prompt_tokens"] - 1).all()
    assert ok["server_cached_prompt_tokens"].sum() > 0
    # The server closes the connection after every streamed response; a request that raced
    # that close went out again on a fresh connection and still counts as one good request.
    assert (
        set(requests["retries"]) <= {0, 1}
        and bundle.summary["client"]["retried"] == requests["retries"].sum()
    )
    assert bundle.summary["selfcheck"]["method"] == "per_request"
    assert bundle.summary["run"]["model"] == server.model and "0 failed" in log


def test_inspect_on_the_live_metrics(llama_run):
    doc = llama_run[4]
    (inst,) = doc["instances"]
    assert doc["dialect"] == "llamacpp"
    assert inst["prefix_cache_queries_tokens"] > inst["prefix_cache_hits_tokens"] > 0
    assert inst["kv_capacity_tokens"] == SLOTS * SLOT_CONTEXT and inst["kv_usage_ratio"] == 0.0  # idle
    text = normalise(parse_exposition(llama_run[0].metrics())).instances[0]
    assert inst["prefix_cache_hits_tokens"] == text.prefix_cache_hits_tokens


def test_run_json_and_advice_hold_only_what_the_server_stated(llama_run):
    server, bundle, _, _, _, _ = llama_run
    facts = bundle.run["deployment"]
    assert facts["server"] == "target" and facts["catalogue"] == {}
    assert facts["engine"]["model"] == {"value": server.model, "source": "server (/v1/models)"}
    assert facts["engine"]["max_num_seqs"] == {"value": SLOTS, "source": "server (/props)"}
    assert facts["engine"]["max_model_len"] == {"value": SLOT_CONTEXT, "source": "server (/props)"}
    assert {f["source"] for f in facts["engine"].values()} <= {
        "server (/v1/models)",
        "server (/props)",
        "server (llamacpp /metrics: prefix-cache hits)",
    }
    out = kvscope("advise", str(bundle.path), "--json")
    assert out.returncode == 0, out.stderr
    advice = json.loads(out.stdout)
    dep = advice["deployment"]
    assert dep["engine_model"] == server.model and dep["max_num_seqs"] == SLOTS
    assert dep["model"] is None and dep["gpu"] is None and dep["num_blocks"] is None  # nobody stated them
    assert dep["max_model_len"] == SLOT_CONTEXT and dep["allocator"] is None
    assert not any(v["verified"] for v in advice["verdicts"])
    missing = {m["fact"]: m["supply"] for m in advice["missing_facts"]}
    assert missing["model"] == "--deployment model=CATALOGUE_MODEL" and "gpu" in missing
    assert "replays_need_facts" in codes(advice["notes"]) and "--deployment" in advice["markdown"]
