"""Targets the probe cannot measure: each gives a statement with its stable code in probe.json,
the figure it concerns stays null, and the exit status is 1 (0 only when the capacity was
measured). Stand-ins serve fixed /metrics text (nothing real lacks these on demand)."""

from __future__ import annotations

import dataclasses
import json

from harness.probe import findings as F
from harness.probe.live import retained_usage
from harness.run.procs import free_port
from tests.harness.analysis.runs import kvscope
from tests.harness.probe.observations import observed
from tests.support.static_metrics import static_server

NO_KV = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m",engine="0"} 0.0\n'
WITH_KV = (
    NO_KV
    + '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.25\n'
    + 'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="64"} 1.0\n'
)


def probe(tmp_path, target: str) -> tuple[int, dict, str]:
    rc, log, _ = kvscope("probe", "--target", target, "--out", str(tmp_path), timeout_s=120)
    return rc, json.loads((tmp_path / "probe.json").read_text()), log


def codes(doc: dict) -> list[str]:
    return [f["code"] for f in doc["findings"]]


def test_a_server_without_kv_usage_is_said_to_have_none(tmp_path):
    with static_server(NO_KV) as url:
        rc, doc, log = probe(tmp_path, url.removesuffix("/metrics"))
    assert rc == 1 and F.NO_KV_USAGE in codes(doc) and "[no_kv_usage_metric]" in log
    assert doc["capacity_tokens"] is None and doc["tokens_per_block"] is None and doc["observations"] == []


def test_an_unreachable_target(tmp_path):
    rc, doc, _ = probe(tmp_path, f"http://127.0.0.1:{free_port()}")
    assert rc == 1 and codes(doc)[0] == F.TARGET_UNREACHABLE and doc["capacity_tokens"] is None


def test_a_server_whose_requests_fail_gives_no_fit(tmp_path):
    with static_server(WITH_KV) as url:  # answers GET only: every completion fails
        rc, doc, _ = probe(tmp_path, url.removesuffix("/metrics"))
    assert rc == 1 and {F.REQUEST_FAILED, F.TOO_FEW_POINTS} <= set(codes(doc))
    assert doc["stated_capacity_tokens"] == 1024 and doc["capacity_tokens"] is None
    assert all(o["error"] for o in doc["observations"])


def test_usage_that_stays_up_after_the_requests_is_said():
    obs = observed(63, 16)
    assert retained_usage(obs) is None
    obs[-1] = dataclasses.replace(obs[-1], idle_after=0.4)
    finding = retained_usage(obs)
    assert finding.code == F.IDLE_USAGE_RETAINED and "40.00%" in finding.text
