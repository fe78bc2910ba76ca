"""`--deployment KEY=VALUE,...`: what the user states becomes facts with source USER, checked
before anything starts; where it contradicts the server, it wins and a note says so."""

from __future__ import annotations

import pytest

from harness.bundle.deployment import DeploymentFacts, Fact
from harness.bundle.deployment_option import USER, parse_deployment, supply, with_user_facts


def test_the_issue_example_parses_into_both_sections():
    stated = parse_deployment(
        "model=llama-3.1-8b,gpu=h100-80gb,tp=1,kv-cache-dtype=auto,num-gpu-blocks=9518,max-num-seqs=256"
    )
    assert {k: f.value for k, f in stated["catalogue"].items()} == {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "tensor_parallel_size": 1,
    }
    assert {k: f.value for k, f in stated["engine"].items()} == {
        "kv_cache_dtype": "auto",
        "num_blocks": 9518,
        "max_num_seqs": 256,
    }
    assert {f.source for s in stated.values() for f in s.values()} == {USER}
    assert parse_deployment("enable-prefix-caching=false, allocator=contiguous")["engine"] == {
        "enable_prefix_caching": Fact(False, USER),
        "allocator": Fact("contiguous", USER),
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pool=12", "KEY one of model, gpu, tp"),
        ("max-num-seqs", "is not KEY=VALUE"),
        ("max-num-seqs=many", "invalid literal"),
        ("max-num-seqs=0", "not a valid max_num_seqs"),
        ("kv-cache-dtype=fp4", "not a valid kv_cache_dtype"),
        ("allocator=slab", "not a valid allocator"),
        ("enable-prefix-caching=maybe", "expected true or false"),
        ("gpu=h1000", "unknown GPU 'h1000'"),
        ("model=llama-9", "unknown model 'llama-9'"),
    ],
)
def test_bad_statements_name_the_part(text, message):
    with pytest.raises(ValueError, match=message):
        parse_deployment(text)


def test_the_users_statement_wins_and_says_what_it_replaced():
    server = DeploymentFacts("target", {"max_model_len": Fact(4096, "server (/v1/models)")})
    merged, notes = with_user_facts(server, parse_deployment("max-model-len=8192,max-num-seqs=64"))
    assert merged.engine["max_model_len"] == Fact(8192, USER) and merged.engine["max_num_seqs"].value == 64
    assert notes == ["--deployment max_model_len=8192 replaces 4096 from server (/v1/models)"]
    assert DeploymentFacts.from_json(merged.to_json()) == merged
    assert with_user_facts(server, parse_deployment("max-model-len=4096"))[1] == []


def test_supply_names_the_key_and_what_to_fill_in():
    assert supply("max_num_seqs") == "--deployment max-num-seqs=N"
    assert supply("tensor_parallel_size") == "--deployment tp=N"
    assert supply("num_blocks") == "--deployment num-gpu-blocks=N"
