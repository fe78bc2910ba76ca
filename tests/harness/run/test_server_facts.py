"""What a --target server states about itself becomes facts with their source: llama.cpp's
/props (a real capture), SGLang's /get_server_info and TGI's /info (shaped as their sources
build them: SGLang's ServerArgs plus scheduler info, TGI's router `Info`), and what the
exporter read from /metrics during the run. Values that do not parse stay unknown."""

from __future__ import annotations

import json

from harness.bundle.deployment import DeploymentFacts, Fact
from harness.run.server_facts import (
    merge,
    props_facts,
    recorded_facts,
    sample_facts,
    sglang_facts,
    target_facts,
    tgi_facts,
)
from tests.support.paths import ROOT

CAPTURES = ROOT / "tests" / "fixtures" / "llamacpp"


def values(stated: dict) -> dict:
    return {(section, k): f.value for section, facts in stated.items() for k, f in facts.items()}


def test_llamacpp_props_state_slots_and_the_slot_context():
    props = json.loads((CAPTURES / "props.json").read_text())  # -np 4 -c 4096
    assert values(props_facts(props)) == {("engine", "max_num_seqs"): 4, ("engine", "max_model_len"): 1024}
    assert {f.source for f in props_facts(props)["engine"].values()} == {"server (/props)"}
    assert props_facts({"total_slots": "4"}) == {} and props_facts(None) == {}


def test_sglang_server_info():
    info = {
        "model_path": "Qwen/Qwen3-8B",
        "max_running_requests": 128,
        "context_length": None,  # not given: the model's, which the server does not echo here
        "page_size": 1,
        "kv_cache_dtype": "auto",
        "disable_radix_cache": False,
        "max_total_num_tokens": 480000,
        "internal_states": [{"num_running_reqs": 3}],
        "version": "0.5.2",
    }
    assert values(sglang_facts(info)) == {
        ("engine", "max_num_seqs"): 128,
        ("engine", "block_size"): 1,
        ("engine", "kv_cache_dtype"): "auto",
        ("engine", "enable_prefix_caching"): True,
    }
    assert "kv_cache_dtype" not in sglang_facts({"kv_cache_dtype": "fp8_e5m2"}).get("engine", {})


def test_tgi_info():
    info = {
        "model_id": "m",
        "max_concurrent_requests": 128,
        "max_input_tokens": 4095,
        "max_total_tokens": 4096,
    }
    assert values(tgi_facts(info)) == {("engine", "max_model_len"): 4096}


def test_target_facts_ask_the_engine_its_dialect_names():
    pages = {
        "http://t/metrics": (200, (CAPTURES / "metrics_before.txt").read_bytes()),
        "http://t/props": (200, (CAPTURES / "props.json").read_bytes()),
    }
    asked: list[str] = []

    def get(url: str, timeout_s: float) -> tuple[int, bytes]:
        asked.append(url)
        return pages.get(url, (404, b""))

    facts = target_facts("http://t", [{"id": "SmolLM2.gguf"}], None, get)
    assert asked == ["http://t/metrics", "http://t/props"]
    assert facts.values("engine") == {"model": "SmolLM2.gguf", "max_num_seqs": 4, "max_model_len": 1024}
    assert facts.engine["model"].source == "server (/v1/models)"
    unreachable = target_facts("http://t", [], None, lambda url, t: (0, b"refused"))
    assert unreachable == DeploymentFacts("target")


def _record(tmp_path, rows: list[dict]):
    folder = tmp_path / "exporter"
    folder.mkdir()
    (folder / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_what_the_metrics_stated_during_the_run(tmp_path):
    up = {"up": True, "dialect": "vllm", "instance": "0", "kv_block_size_tokens": 16.0}
    rows = [
        {**up, "kv_capacity_blocks": 9518.0, "prefix_cache_hits_tokens": 0.0, "kv_cache_dtype": "auto"},
        {
            **up,
            "kv_capacity_blocks": 9518.0,
            "prefix_cache_hits_tokens": 512.0,
            "gpu_memory_utilization": 0.9,
        },
        {"up": False, "reason": "timeout"},
    ]
    stated = sample_facts(_record(tmp_path, rows))
    assert values(stated) == {
        ("engine", "block_size"): 16,
        ("engine", "num_blocks"): 9518,
        ("engine", "allocator"): "paged",
        ("engine", "enable_prefix_caching"): True,
        ("catalogue", "gpu_memory_utilization"): 0.9,
    }
    assert stated["engine"]["num_blocks"].source == "server (vllm /metrics)"


def test_the_recorded_facts_keep_the_first_source_then_the_users(tmp_path):
    at_start = DeploymentFacts("target", {"max_model_len": Fact(1024, "server (/props)")})
    folder = _record(
        tmp_path, [{"up": True, "dialect": "llamacpp", "instance": "0", "prefix_cache_hits_tokens": 9}]
    )
    facts, notes = recorded_facts(None, at_start, folder, "max-model-len=2048,max-num-batched-tokens=512")
    assert facts.engine["max_model_len"].value == 2048 and facts.engine["max_num_batched_tokens"].value == 512
    assert facts.engine["enable_prefix_caching"].value is True and "allocator" not in facts.engine
    assert notes == ["--deployment max_model_len=2048 replaces 1024 from server (/props)"]
    assert merge(at_start, {"engine": {"max_model_len": Fact(9, "x")}}) == at_start
    bundled = DeploymentFacts("bundled engine")
    assert recorded_facts(bundled, at_start, folder, "") == (bundled, [])
