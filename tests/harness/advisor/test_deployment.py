"""The advisor's deployment comes from the recorded facts and the server's samples, never
from the bundled engine's defaults: what no source stated is reported as unknown."""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd

from harness.advisor.advice import deployment_view
from harness.advisor.deployment import resolve
from harness.bundle.deployment import BUNDLED, SERVER_MODELS, DeploymentFacts, Fact, of_config
from harness.bundle.deployment_option import parse_deployment, with_user_facts
from reference_engine.config import EngineConfig

SAMPLES = pd.DataFrame({"time_unix": [1.0], "kv_capacity_blocks": [1445.0], "kv_block_size_tokens": [16.0]})


def test_a_target_that_stated_nothing_has_no_invented_settings():
    dep = resolve(DeploymentFacts("target"), SAMPLES)
    view = deployment_view(dep)
    assert not dep.bundled and dep.model is None and dep.max_model_len is None
    assert dep.num_blocks == 1445 and view["block_size"] == 16  # what the samples show
    assert view["engine_model"] is None and view["max_num_seqs"] is None and view["allocator"] is None
    assert {"max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype"} <= set(view["unstated"])
    assert "block_size" not in view["unstated"]
    assert {"model", "gpu", "tensor_parallel_size"} <= set(view["unstated"])
    assert dep.unknown(("max_num_seqs", "num_blocks", "block_size", "allocator", "model")) == [
        "max_num_seqs",
        "allocator",
        "model",
    ]


def test_what_a_target_stated_is_used():
    facts = DeploymentFacts(
        "target", {"model": Fact("m", SERVER_MODELS), "max_model_len": Fact(8192, SERVER_MODELS)}
    )
    dep = resolve(facts, SAMPLES)
    assert dep.max_model_len == 8192 and deployment_view(dep)["engine_model"] == "m"
    merged, notes = with_user_facts(facts, parse_deployment("max-num-seqs=128,max-model-len=4096"))
    told = resolve(merged, SAMPLES)
    assert told.known("max_num_seqs") == 128 and "max_num_seqs" not in told.unstated
    assert told.max_model_len == 4096 and notes == [
        "--deployment max_model_len=4096 replaces 8192 from server (/v1/models)"
    ]


def test_a_bundled_engine_states_everything():
    engine = EngineConfig(model="tiny-random", num_blocks=48, max_num_seqs=16)
    dep = resolve(of_config("bundled engine", asdict(engine), None, BUNDLED), pd.DataFrame({"time_unix": []}))
    assert dep.bundled and not dep.simulated and dep.unstated == frozenset()
    assert dep.num_blocks == 48 and deployment_view(dep)["max_num_seqs"] == 16


def test_a_run_without_facts_is_a_server_nothing_is_known_about():
    assert resolve(None, SAMPLES).unstated == resolve(DeploymentFacts("target"), SAMPLES).unstated
