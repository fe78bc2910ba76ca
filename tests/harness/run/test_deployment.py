"""The deployment facts `kvscope run` records: the bundled engine's configuration built from
the argv it is given, or only what a --target server stated about itself."""

from __future__ import annotations

import pytest

from harness.bundle.deployment import BUNDLED, SERVER_MODELS, DeploymentFacts
from harness.cli import build_parser
from harness.run.config import ConfigError, from_args
from harness.run.deployment import bundled_facts, stated_facts
from reference_engine.config import EngineConfig


def test_the_bundled_engine_is_recorded_field_by_field_from_its_argv():
    facts = bundled_facts("tiny-random", ["--num-blocks", "32", "--no-enable-prefix-caching", "--seed", "3"])
    assert facts.server == "bundled engine" and facts.bundled and facts.catalogue == {}
    engine = facts.values("engine")
    assert engine["model"] == "tiny-random" and engine["num_blocks"] == 32 and engine["seed"] == 3
    assert engine["enable_prefix_caching"] is False
    assert engine["max_num_seqs"] == EngineConfig().max_num_seqs  # the engine's own default, stated by it
    assert {f.source for f in facts.engine.values()} == {BUNDLED}
    assert DeploymentFacts.from_json(facts.to_json()) == facts


def test_the_simulator_records_its_catalogue_deployment():
    facts = bundled_facts(None, ["--simulate", "--sim-gpu", "l4", "--tensor-parallel-size", "2"])
    assert facts.server == "bundled simulator"
    assert facts.values("catalogue")["gpu"] == "l4" and facts.values("catalogue")["tensor_parallel_size"] == 2
    assert facts.values("engine")["model"] == EngineConfig().model


def test_engine_flags_that_do_not_parse_fail_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match="do not parse"):
        bundled_facts(None, ["--num-blocks", "many"])
    args = build_parser().parse_args(
        ["run", "--workload", "chat", "--engine-arg=--bogus", "--out", str(tmp_path / "b")]
    )
    with pytest.raises(ConfigError, match="unrecognized arguments: --bogus"):
        from_args(args)


def test_a_target_records_only_what_it_stated():
    cards = [{"id": "a", "max_model_len": 4096}, {"id": "b", "max_model_len": None}]
    first = stated_facts(cards, None)
    assert first.server == "target" and not first.bundled
    assert first.values("engine") == {"model": "a", "max_model_len": 4096}
    assert {f.source for f in first.engine.values()} == {SERVER_MODELS}
    assert stated_facts(cards, "b").values("engine") == {"model": "b"}
    assert stated_facts(cards, "c").engine == {} and stated_facts([], None).engine == {}


def test_run_config_carries_the_facts_for_the_bundled_engine_only(tmp_path):
    parse = build_parser().parse_args
    bundled = from_args(
        parse(["run", "--workload", "chat", "--num-blocks", "32", "--out", str(tmp_path / "a")])
    )
    assert bundled.deployment is not None and bundled.deployment.values("engine")["num_blocks"] == 32
    assert "deployment" not in bundled.to_dict()
    target = from_args(
        parse(["run", "--workload", "chat", "--target", "http://h:1", "--out", str(tmp_path / "b")])
    )
    assert target.deployment is None  # known only once the server answers /v1/models


def test_deployment_statements_are_checked_before_anything_starts(tmp_path):
    def config(*args: str):
        return from_args(
            build_parser().parse_args(["run", "--workload", "chat", *args, "--out", str(tmp_path / "x")])
        )

    stated = config("--target", "http://h:1", "--deployment", "max-num-seqs=8")
    assert (
        stated.deployment_text == "max-num-seqs=8" and stated.to_dict()["deployment_text"] == "max-num-seqs=8"
    )
    with pytest.raises(ConfigError, match="describes a --target server"):
        config("--deployment", "max-num-seqs=8")
    with pytest.raises(ConfigError, match="KEY one of"):
        config("--target", "http://h:1", "--deployment", "slots=8")
