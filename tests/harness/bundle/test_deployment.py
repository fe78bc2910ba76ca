"""run.json's deployment facts read back: well-formed records round-trip, anything else is a
BundleError naming what is wrong."""

from __future__ import annotations

import pytest

from harness.bundle.deployment import DeploymentFacts, Fact
from harness.bundle.errors import BundleError


def test_facts_round_trip_with_their_sources():
    facts = DeploymentFacts("target", {"max_model_len": Fact(8192, "server (/v1/models)")})
    data = facts.to_json()
    assert data == {
        "server": "target",
        "engine": {"max_model_len": {"value": 8192, "source": "server (/v1/models)"}},
        "catalogue": {},
    }
    assert DeploymentFacts.from_json(data) == facts


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"server": "somewhere"}, "must name its server"),
        ([], "must name its server"),
        ({"server": "target", "engine": {"block_size": 16}}, "must map names to {value, source}"),
        ({"server": "target", "engine": {"block_size": {"value": "16", "source": "x"}}}, "do not parse"),
        ({"server": "target", "engine": {"allocator": {"value": "slab", "source": "x"}}}, "do not parse"),
        ({"server": "target", "engine": {"no_such": {"value": 1, "source": "x"}}}, "engine.no_such=1"),
    ],
)
def test_malformed_facts_are_a_bundle_error(data, message):
    with pytest.raises(BundleError, match=message.replace("{", r"\{").replace("}", r"\}")):
        DeploymentFacts.from_json(data)
