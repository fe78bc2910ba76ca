"""`TokenHistogram` exposes exactly what prometheus_client's `Histogram` would for the same
observations (bounds as it formats them, cumulative buckets, count, sum), observed a batch at a
time; bad bounds are refused."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest

from reference_engine.server.metrics import ITL_BUCKETS, WRITE_DELAY_BUCKETS
from reference_engine.server.token_histogram import TokenHistogram

LABELS = {"model_name": "smol", "engine": "0"}


def _exposition(registry: CollectorRegistry) -> list[str]:
    lines = generate_latest(registry).decode().splitlines()
    return [line for line in lines if "_created" not in line]


@pytest.mark.parametrize("buckets", [ITL_BUCKETS, WRITE_DELAY_BUCKETS, (1, 2.5, 5, float("inf"))])
def test_the_family_is_prometheus_clients_own(buckets):
    rnd = random.Random(7)
    finite = [b for b in buckets if b != float("inf")]
    # Values on every bound (le: counted in that bound's bucket), between, below and above all.
    values = [*finite, 0.0, -1.0, finite[-1] * 3] + [rnd.uniform(0, finite[-1] * 1.5) for _ in range(500)]
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    histogram = TokenHistogram("vllm:some_seconds", "Some doc.", LABELS, buckets, ours)
    reference = Histogram("vllm:some_seconds", "Some doc.", list(LABELS), buckets=buckets, registry=theirs)
    child = reference.labels(*LABELS.values())
    for start in range(0, len(values), 37):  # batches of uneven sizes, one of them empty below
        batch = values[start : start + 37]
        histogram.observe_many(batch)
        for v in batch:
            child.observe(v)
    histogram.observe_many([])
    assert _exposition(ours) == _exposition(theirs)


def test_bounds_that_do_not_increase_are_refused():
    with pytest.raises(ValueError, match="must increase"):
        TokenHistogram("x_seconds", "X.", LABELS, (0.1, 0.05), CollectorRegistry())
