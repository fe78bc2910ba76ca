"""The kvscope_kv_* exposition on a fixed hub state, against a capture of it
(`data/kv_events_exposition.prom`, the Prometheus text format, and `.openmetrics`): the
families' names, help, types, labels and values must not change unless the capture changes
with them, in the same commit, on purpose. Regenerate with
`python -m tests.exporter.test_kv_events_collector`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import CollectorRegistry

from exporter.kv_events.chains import HotChain
from exporter.kv_events.collector import KvEventsCollector
from exporter.kv_events.curve import CurvePoint
from exporter.kv_events.distance import DistanceHistogram
from exporter.kv_events.hub import TierView

DATA = Path(__file__).parent / "data"
CAPTURES = {
    "kv_events_exposition.prom": generate_latest,
    "kv_events_exposition.openmetrics": generate_openmetrics,
}


def _distances(*values: int) -> dict:
    h = DistanceHistogram()
    for v in values:
        h.add(v)
    return h.to_dict()


def _tier(instance: str, medium: str, **kw) -> TierView:
    base = dict(
        target="vllm",
        instance=instance,
        medium=medium,
        cached_blocks=40,
        stored_blocks=120,
        removed_blocks=80,
        first_stores=90,
        capacity_misses=25,
        duplicate_stores=5,
        unknown_removes=1,
        overflow=0,
        block_size=16,
        pool_blocks=64,
        pool_from="engine",
    )
    return TierView(**{**base, **kw})


@dataclass
class FixedHub:
    """What the collector reads of a `KvEventsHub`, held still."""

    views: list[TierView]
    fleet_shared_blocks: int = 0
    sources: list[dict] = field(default_factory=list)

    def sources_view(self) -> list[dict]:
        return self.sources


def fixed_hub() -> FixedHub:
    """Two instances of one target (a GPU tier each, one with a CPU tier below it), every
    optional value both present and absent somewhere, and two sources (one connected)."""
    gpu0 = _tier(
        "0",
        "GPU",
        stored_per_second=2.5,
        removed_per_second=1.25,
        capacity_misses_per_second=0.5,
        curve=[
            CurvePoint(0.25, 16, 3, hit_ratio=0.4, saved_prefill_tokens_per_second=12.0),
            CurvePoint(1.0, 64, 9, hit_ratio=0.55),
            CurvePoint(2.0, 128, 11),
        ],
        hot_chains=[HotChain("00000000000000aa", 4, 7, 64), HotChain("00000000000000bb", 2, 3, 32)],
        shared_blocks=6,
        distances=_distances(0, 1, 3, 17, 900, 5000),
    )
    cpu0 = _tier("0", "CPU", cached_blocks=200, stored_blocks=300, removed_blocks=100)
    gpu1 = _tier("1", "GPU", cached_blocks=12, curve=[CurvePoint(0.5, 32, 0, hit_ratio=0.1)])
    sources = [
        {
            "name": "vllm",
            "connected": True,
            "batches": 321,
            "replayed_batches": 4,
            "problems": {"gap": 2, "malformed": 1},
            "disconnects": 3,
        },
        {
            "name": "sglang",
            "connected": False,
            "batches": 0,
            "replayed_batches": 0,
            "problems": {},
            "disconnects": 0,
        },
    ]
    return FixedHub([gpu0, cpu0, gpu1], fleet_shared_blocks=5, sources=sources)


def exposition(encoder) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KvEventsCollector(fixed_hub()))  # type: ignore[arg-type]
    return encoder(registry)


def test_the_exposition_matches_its_capture() -> None:
    for name, encoder in CAPTURES.items():
        assert exposition(encoder).decode() == (DATA / name).read_text(), name


def test_an_empty_hub_exports_only_the_families() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KvEventsCollector(FixedHub([])))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert samples == [] and "# TYPE kvscope_kv_blocks_stored_total counter" in text


if __name__ == "__main__":
    for name, encoder in CAPTURES.items():
        (DATA / name).write_bytes(exposition(encoder))
