"""Decode one KV event batch payload, whichever engine and release wrote it.

Eras (docs/reference/vllm-kv-events.md, "Versions"):
- vLLM >= 0.24 and SGLang: the batch is an array `[ts, events, rank]`; each event a map
  tagged `{"type": "BlockStored" | "BlockRemoved" | "AllBlocksCleared", ...}`.
- vLLM 0.9 - 0.23: events are arrays `["BlockStored", hashes, parent, token_ids, block_size,
  lora_id, medium, ...]` (fields positional in declaration order; later releases only append).
The rank is vLLM's `data_parallel_rank` or SGLang's `attn_dp_rank` (may be null); vLLM
0.9.0 has no third element. Hashes are ints (vLLM unsigned 64-bit, SGLang signed) or bytes.

Only what the subscriber uses is decoded: `token_ids`, LoRA fields and `extra_keys` stay
raw msgpack (`msgspec.Raw`), which keeps decoding cheap. Unknown keys are ignored (newer
optional fields do not break the decoder).

Fast path: one typed decode for the map era (then the array era). A batch either fails to
decode (truncated, not msgpack, not a batch: `WireError` with a reason) or is decoded event
by event, so an unknown event tag drops that event only and is counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

Hash = int | bytes


class StoredMap(msgspec.Struct, tag="BlockStored", gc=False):
    block_hashes: list[Hash]
    parent_block_hash: Hash | None = None
    token_ids: msgspec.Raw = msgspec.Raw()
    block_size: int = 0
    medium: str | None = None
    group_idx: int | None = None


class RemovedMap(msgspec.Struct, tag="BlockRemoved", gc=False):
    block_hashes: list[Hash]
    medium: str | None = None
    group_idx: int | None = None


class ClearedMap(msgspec.Struct, tag="AllBlocksCleared", gc=False):
    pass


class StoredArray(msgspec.Struct, tag="BlockStored", array_like=True, gc=False):
    block_hashes: list[Hash]
    parent_block_hash: Hash | None = None
    token_ids: msgspec.Raw = msgspec.Raw()
    block_size: int = 0
    lora_id: msgspec.Raw = msgspec.Raw()
    medium: str | None = None
    lora_name: msgspec.Raw = msgspec.Raw()
    extra_keys: msgspec.Raw = msgspec.Raw()
    group_idx: int | None = None


class RemovedArray(msgspec.Struct, tag="BlockRemoved", array_like=True, gc=False):
    block_hashes: list[Hash]
    medium: str | None = None
    group_idx: int | None = None


class ClearedArray(msgspec.Struct, tag="AllBlocksCleared", array_like=True, gc=False):
    pass


MapEvent = StoredMap | RemovedMap | ClearedMap
ArrayEvent = StoredArray | RemovedArray | ClearedArray
STORED = (StoredMap, StoredArray)
REMOVED = (RemovedMap, RemovedArray)


class _MapBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[MapEvent]
    data_parallel_rank: int | None = None


class _ArrayBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[ArrayEvent]
    data_parallel_rank: int | None = None


class _AnyBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


@dataclass(slots=True)
class Batch:
    ts: float
    rank: int | None
    events: list[Any]  # STORED, REMOVED or Cleared* structs, in order
    unknown: int = 0  # events dropped: unknown tag or a shape no era has
    era: str = "map"


class WireError(ValueError):
    """A payload that is not a batch; `reason` is "truncated" or "malformed"."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class BatchDecoder:
    """Reusable decoders (msgspec decoders are built once). Not thread-safe."""

    def __init__(self) -> None:
        self._map = msgspec.msgpack.Decoder(_MapBatch)
        self._array = msgspec.msgpack.Decoder(_ArrayBatch)
        self._any = msgspec.msgpack.Decoder(_AnyBatch)
        self._one = {"map": msgspec.msgpack.Decoder(MapEvent), "array": msgspec.msgpack.Decoder(ArrayEvent)}
        self._encoder = msgspec.msgpack.Encoder()

    def decode(self, payload: bytes) -> Batch:
        try:
            b = self._map.decode(payload)
            return Batch(b.ts, b.data_parallel_rank, b.events)
        except msgspec.ValidationError:
            pass
        except msgspec.DecodeError as exc:
            raise _wire_error(exc) from None
        try:
            b = self._array.decode(payload)
            return Batch(b.ts, b.data_parallel_rank, b.events, era="array")
        except msgspec.ValidationError:
            pass
        try:
            loose = self._any.decode(payload)
        except msgspec.ValidationError as exc:
            raise WireError("malformed", f"not a KV event batch: {exc}") from None
        return self._event_by_event(loose)

    def _event_by_event(self, loose: _AnyBatch) -> Batch:
        """The slow path: each event re-encoded and decoded alone (so raw fields stay raw)."""
        events, unknown, eras = [], 0, set()
        for raw in loose.events:
            era = "map" if isinstance(raw, dict) else "array"
            try:
                events.append(self._one[era].decode(self._encoder.encode(raw)))
                eras.add(era)
            except msgspec.ValidationError:
                unknown += 1
        era = eras.pop() if len(eras) == 1 else "mixed" if eras else "map"
        return Batch(loose.ts, loose.data_parallel_rank, events, unknown, era)


def _wire_error(exc: msgspec.DecodeError) -> WireError:
    reason = "truncated" if "truncated" in str(exc) else "malformed"
    return WireError(reason, f"payload is not msgpack: {exc}")
