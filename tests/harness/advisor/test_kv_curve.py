"""The advisor's block-level verdicts on bundles with kv_events.parquet: route_by_prefix when
replicas cache the same blocks, verified by replaying the trace on that many simulated
replicas routed by prefix against round-robin; and the notes when nothing fires.

The KV event series are produced by the exporter's own hub and recorder from batches in
vLLM's wire format (two replicas that computed the same system prompts), then written into
the bundle by the bundle writer, as `kvscope run --kv-events` does."""

from __future__ import annotations

import random

import msgspec
import pytest

from exporter.kv_events.hub import KvEventsHub
from exporter.kv_events.record import KvRecorder
from exporter.kv_events.spec import KvEventsSource
from harness.advisor import run_inputs
from harness.advisor.advice import advise, diagnose_run
from harness.advisor.evidence import workload_evidence
from harness.advisor.kv_curve import kv_event_verdicts
from harness.advisor.whatif import make_replayer
from harness.bundle.finding import Finding, codes
from harness.bundle.kv_events import write_kv_events
from reference_engine.config import EngineConfig
from tests.harness.advisor.bundles import Req, simulate_bundle


def _stored(hashes: list[int], parent: int | None = None) -> dict:
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "block_size": 16}


def record_replicas(folder, blocks: dict[str, list[int]]) -> None:
    """Each replica stores its blocks (in chains of 8); the hub ticks once and records."""
    hub = KvEventsHub([KvEventsSource(name, "tcp://127.0.0.1:1") for name in blocks])
    for state, hashes in zip(hub.states, blocks.values()):
        events = [_stored(hashes[i : i + 8]) for i in range(0, len(hashes), 8)]
        state.live_frames([b"", (0).to_bytes(8, "big"), msgspec.msgpack.encode([1.0, events, 0])], 0.0)
    hub.tick(now=1.0)
    exporter_dir = folder / "raw" / "exporter"
    recorder = KvRecorder(exporter_dir)
    recorder.write(hub, 1.0)
    recorder.close()
    assert write_kv_events(folder, exporter_dir)


@pytest.fixture(scope="module")
def shared_prompts_bundle(tmp_path_factory):
    """12 system prompts of 256 tokens, one request per 0.25 s, a pool that holds about six
        of them, each request's prompt drawn at random: spread round-robin over two replicas, each
    replica sees all twelve."""
    rng = random.Random(1)
    trace = [
        Req(i * 0.25, 256 + rng.randint(40, 120), rng.randint(20, 60), rng.randrange(12), 256)
        for i in range(240)
    ]
    engine = EngineConfig(num_blocks=120, block_size=16, max_num_seqs=4)
    return simulate_bundle(tmp_path_factory.mktemp("routing"), trace, None, engine)


def test_replicas_holding_the_same_chains_are_told_to_route_by_prefix(shared_prompts_bundle) -> None:
    common = list(range(1, 81))  # 80 blocks both replicas computed
    record_replicas(
        shared_prompts_bundle, {"a": common + list(range(1000, 1040)), "b": common + list(range(2000, 2020))}
    )
    advice = advise(run_inputs.load(shared_prompts_bundle))
    (verdict,) = [v for v in advice.verdicts if v.action == "route_by_prefix"]
    assert verdict.evidence["blocks_cached_on_several_replicas"] == 80
    assert verdict.projected == {"duplicated_blocks": 80, "replicas": 2}
    assert verdict.evidence["shared_share"] == round(160 / 220, 4)
    replay = verdict.replay
    assert replay["changed"]["prefix_hit_ratio"] > replay["baseline"]["prefix_hit_ratio"] + 0.02
    assert verdict.verified and replay["changed"]["completed"] == replay["baseline"]["completed"]
    assert "no_prefix_counters" in codes(advice.notes)  # a and b are not scraped


def test_replicas_that_share_little_get_a_note_not_a_verdict(shared_prompts_bundle, tmp_path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    for name in ("run.json", "requests.parquet", "server.parquet"):
        (folder / name).write_bytes((shared_prompts_bundle / name).read_bytes())
    record_replicas(folder, {"a": [1, 2] + list(range(100, 160)), "b": [1, 2] + list(range(200, 260))})
    advice = advise(run_inputs.load(folder), replay=False)
    assert not [v for v in advice.verdicts if v.action == "route_by_prefix"]
    (note,) = [n for n in advice.notes if n.code == "prefixes_not_shared"]
    assert note.subject == "route_by_prefix"


def test_block_verdicts_on_an_implausible_baseline_stay_indicative(shared_prompts_bundle) -> None:
    common = list(range(1, 81))
    record_replicas(
        shared_prompts_bundle, {"a": common + list(range(1000, 1040)), "b": common + list(range(2000, 2020))}
    )
    inputs = run_inputs.load(shared_prompts_bundle)
    work = workload_evidence(inputs)
    diag = diagnose_run(inputs, work)
    replayer = make_replayer(inputs, work, diag.mean_running, diag.preemptions)
    why = Finding("replay_implausible", "the replayed baseline finished in 2% of the run's time")
    (verdict,) = kv_event_verdicts(inputs, replayer, False, [], distrust=why)
    assert verdict.action == "route_by_prefix" and verdict.replay["changed"]["prefix_hit_ratio"] is not None
    # The replay still shows the gain; the distrusted baseline is what keeps it from verifying.
    assert not verdict.verified and verdict.replay["shown"]
    assert verdict.status == "indicative" and verdict.status_reason == why
    assert verdict.replay["implausible"] == {"code": "replay_implausible", "text": why.text}
    (trusted,) = kv_event_verdicts(inputs, replayer, False, [])
    assert trusted.verified and trusted.status == "verified" and "implausible" not in trusted.replay
    assert trusted.replay["shown"]
