"""The subscriber's decoding against bytes written by vLLM's own structures and publisher
(tests/fixtures/vllm_kv_events, README there): vLLM 0.33.0's tagged-map events, the 0.23.0
array era, the PUB multipart and the replay replies as a DEALER receives them, a
data-parallel rank; and the cached set rebuilt across the scenario, live and by replay."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import msgspec
import pytest

from exporter.kv_events.source import SourceState
from exporter.kv_events.spec import KvEventsSource
from exporter.kv_events.wire import STORED, BatchDecoder, ClearedArray, ClearedMap
from tests.support.paths import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "vllm_kv_events"
A0, A1, A2, A3 = 7322446309363477352, 17027874615116373601, 8528054903622213768, 13771777425441735588
B2 = 3250420131345999776


def frames_of(path: Path) -> list[bytes]:
    """The fixtures' .zmq container: u32 BE frame count, then u32 BE length + bytes each."""
    data = path.read_bytes()
    (n,), off, out = struct.unpack_from(">I", data), 4, []
    for _ in range(n):
        (size,) = struct.unpack_from(">I", data, off)
        out.append(data[off + 4 : off + 4 + size])
        off += 4 + size
    assert off == len(data)
    return out


def _generic_events(payload_generic: list) -> list[dict]:
    return payload_generic[1]


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.msgpack")), ids=lambda p: p.stem)
def test_every_fixture_payload_decodes_to_what_it_holds(path: Path) -> None:
    doc = json.loads(path.with_suffix(".json").read_text())
    generic = doc["payload_generic"]
    batch = BatchDecoder().decode(path.read_bytes())
    assert batch.unknown == 0
    assert batch.era == ("array" if path.name.startswith("v0_23") else "map")
    assert batch.ts == generic[0] and batch.rank == generic[2]
    assert len(batch.events) == len(generic[1])
    for event, raw in zip(batch.events, generic[1]):
        tag = raw["type"] if isinstance(raw, dict) else raw[0]
        fields = (
            raw if isinstance(raw, dict) else dict(zip(("type", "block_hashes", "parent_block_hash"), raw))
        )
        assert type(event).__name__.removesuffix("Map").removesuffix("Array") in tag
        if tag != "AllBlocksCleared":
            assert event.block_hashes == fields["block_hashes"]
        if isinstance(event, STORED):
            assert event.parent_block_hash == fields["parent_block_hash"]
            assert msgspec.msgpack.decode(event.token_ids) == (
                raw["token_ids"] if isinstance(raw, dict) else raw[3]
            )
            assert event.block_size == 16 and event.medium == "GPU"
        if isinstance(event, (ClearedMap, ClearedArray)):
            assert tag == "AllBlocksCleared"


def test_hashes_at_or_above_2_63_stay_unsigned() -> None:
    batch = BatchDecoder().decode((FIXTURES / "pub_seq0.msgpack").read_bytes())
    assert batch.events[0].block_hashes == [A0, A1, A2] and A1 >= 2**63


def _state() -> SourceState:
    return SourceState(KvEventsSource("vllm", "tcp://127.0.0.1:1", replay="tcp://127.0.0.1:2"))


def _cached(state: SourceState, rank: str = "0") -> set:
    return set(state.instances[rank].tiers["GPU"].cached)


def test_live_frames_rebuild_the_cached_set_across_the_scenario() -> None:
    state = _state()
    seen = []
    for seq in range(6):
        frames = frames_of(FIXTURES / f"pub_seq{seq}.zmq")
        assert frames[0] == b"kv-events" and int.from_bytes(frames[1], "big") == seq
        assert state.live_frames(frames, 0.0) is None
        seen.append(_cached(state))
        if seq == 1:
            entry = state.instances["0"].tiers["GPU"].cached[B2]
            assert entry.parent == A1 and entry.depth == 3  # B shared A's two first blocks
    assert seen[0] == {A0, A1, A2}
    assert seen[1] == {A0, A1, A2, B2, A3}
    assert len(seen[3]) == 6 and {A0, A1, B2} <= seen[3] and not seen[3] & {A2, A3}
    assert seen[4] == set() and seen[5] == {A0}
    tier = state.instances["0"].tiers["GPU"]
    assert tier.capacity_misses == 0, "a0 returns after a reset: not for lack of room"
    assert state.problems == {} and state.instances["0"].cleared == 1


def test_the_replay_files_fill_a_gap() -> None:
    """Seq 0 and 1 arrive live, 2-4 are dropped, 5 arrives: the subscriber asks for replay
    from 2 and applies what the ROUTER sent (replay_from2_*: seq 2-5); the held 5 is then skipped."""
    state = _state()
    for seq in (0, 1):
        state.live_frames(frames_of(FIXTURES / f"pub_seq{seq}.zmq"), 0.0)
    assert state.live_frames(frames_of(FIXTURES / "pub_seq5.zmq"), 0.0) == 2
    assert _cached(state) == {A0, A1, A2, B2, A3}, "nothing applied while the replay runs"
    for k in range(5):
        frames = frames_of(FIXTURES / f"replay_from2_{k}.zmq")
        assert frames[0] == b""
        done = state.replay_frames(frames)
        assert done == (k == 4)
    assert _cached(state) == {A0}
    assert state.stream.replayed == 4 and state.problems == {"gap": 1}  # 2..5; the held 5 is a duplicate
    assert state.stream.expected == 6


def test_replay_beyond_the_newest_batch_is_only_the_end_marker() -> None:
    frames = frames_of(FIXTURES / "replay_from99_0.zmq")
    assert frames == [b"", b"", b"\xff" * 8, b""]
    state = _state()
    state.live_frames(frames_of(FIXTURES / "pub_seq1.zmq"), 0.0)  # joins at 1: replay from 0
    assert state.stream.replaying and state.replay_frames(frames)
    assert not state.stream.replaying and state.stream.missed_at_join == 1


def test_the_array_era_rebuilds_the_same_sets() -> None:
    live, old = _state(), _state()
    for seq in range(6):
        live.live_frames(frames_of(FIXTURES / f"pub_seq{seq}.zmq"), 0.0)
        payload = (FIXTURES / f"v0_23_array_batch{seq}.msgpack").read_bytes()
        old.live_frames([b"kv-events", seq.to_bytes(8, "big"), payload], 0.0)
        assert _cached(old) == _cached(live)
    assert old.eras == {"array"} and live.eras == {"map"}


def test_the_data_parallel_rank_selects_the_instance() -> None:
    state = _state()
    for seq in (0, 1):
        payload = (FIXTURES / f"dp1_batch{seq}.msgpack").read_bytes()
        state.live_frames([b"kv-events", seq.to_bytes(8, "big"), payload], 0.0)
    assert set(state.instances) == {"1"} and _cached(state, "1") == {A0, A1, A2, B2, A3}


def test_pre_0_26_replay_framing_is_read_too() -> None:
    """Before vLLM 0.26 the ROUTER sent [seq, payload] and the end marker [ff*8, b""]."""
    state = _state()
    state.live_frames(frames_of(FIXTURES / "pub_seq0.zmq"), 0.0)
    assert state.live_frames(frames_of(FIXTURES / "pub_seq2.zmq"), 0.0) == 1
    payload1 = (FIXTURES / "pub_seq1.msgpack").read_bytes()
    assert not state.replay_frames([b"", (1).to_bytes(8, "big"), payload1])
    assert state.replay_frames([b"", b"\xff" * 8, b""])
    cached = _cached(state)
    assert len(cached) == 5 and {A0, A1, B2} <= cached and not cached & {A2, A3}  # as after seq 2
    assert state.stream.expected == 3 and state.problems == {"gap": 1}


def test_sglang_batches_decode_signed_hashes_and_a_null_rank() -> None:
    """SGLang 0.5.23 (docs/reference/vllm-kv-events.md): tagged maps without extra_keys and
    group_idx, signed int64 hashes, `attn_dp_rank` null, its own medium names."""
    events = [
        {
            "type": "BlockStored",
            "block_hashes": [-5, 7],
            "parent_block_hash": None,
            "token_ids": list(range(32)),
            "block_size": 16,
            "lora_id": None,
            "medium": "CPU_PINNED",
            "cache_salt": "tenant-a",
        },
        {"type": "BlockRemoved", "block_hashes": [-5], "medium": "CPU_PINNED"},
    ]
    state = _state()
    state.live_frames([b"", (0).to_bytes(8, "big"), msgspec.msgpack.encode([2.0, events, None])], 0.0)
    assert set(state.instances) == {"0"}
    assert set(state.instances["0"].tiers["CPU_PINNED"].cached) == {7}
    assert state.problems == {}
