"""The advisor's verdicts state their effect in measured terms when the bundle holds a probe:
how many requests of the run's p90 length the pool holds now and with the change."""

from __future__ import annotations

import pandas as pd

from harness.advisor.measured_terms import with_measured_terms
from harness.advisor.verdicts import Proposal
from harness.advisor.whatif import Change
from harness.probe.assemble import finish
from harness.probe.render import markdown
from harness.probe.result import write_result
from harness.probe.stated import StatedPool
from tests.harness.probe.observations import observed

REQUESTS = pd.DataFrame(
    {"ok": [True] * 20, "prompt_tokens": [56] * 20, "output_tokens": [150] * 19 + [192]}
)  # p90 of prompt + output: 206 tokens, KV for 205 at the last step: 13 blocks of 16


def proposals() -> list[Proposal]:
    more = Change("add memory: a KV pool of 128 blocks", num_blocks=128)
    cut = Change("max_model_len=4096", max_model_len=4096)
    return [
        Proposal("add_memory", "Add KV memory", {}, {"pool_blocks": 128}, "128 blocks", more),
        Proposal("cut_context", "Cut max_model_len", {}, {}, "max_model_len 8,192 -> 4,096", cut),
        Proposal("kv_not_bottleneck", "Not the KV cache", {}, {}, "more KV will not help", None),
    ]


def test_verdicts_gain_the_measured_statement_where_a_probe_is_in_the_bundle(tmp_path):
    stated = StatedPool("vllm", num_blocks=64, block_size=16, max_model_len=8192)
    result = finish("http://x", stated, observed(63, 16), [], (), "")
    write_result(tmp_path, result, markdown(result))
    notes: list[str] = []
    more, cut, other = with_measured_terms(proposals(), tmp_path, REQUESTS, notes)
    assert more.projected["measured_capacity"] == {
        "length": "p90",
        "tokens": 206,
        "holds_now": 4,
        "holds_after": 9,
    }
    assert more.effect.endswith("holds 4 requests at your p90 length (206 tokens), 9 with the change")
    assert "whatever max_model_len is" in cut.effect  # a paged pool: the cut changes no request's cost
    assert other == proposals()[2] and not notes


def test_without_a_probe_or_with_a_broken_one_nothing_changes(tmp_path):
    assert with_measured_terms(proposals(), tmp_path, REQUESTS, []) == proposals()
    (tmp_path / "probe.json").write_text("[1, 2]")
    notes: list = []
    assert with_measured_terms(proposals(), tmp_path, REQUESTS, notes) == proposals()
    assert [n.code for n in notes] == ["probe_unreadable"]
