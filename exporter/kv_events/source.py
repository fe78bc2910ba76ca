"""Everything one `--kv-events` source knows, fed frame by frame (no sockets here).

Frames (docs/reference/vllm-kv-events.md):
- live: `[topic, seq (8 bytes big-endian), payload]`;
- replay, as a DEALER receives them (the ROUTER's empty delimiter first): vLLM >= 0.26 and
  SGLang `[b"", topic, seq, payload]`, end `[b"", b"", ff*8, b""]`; vLLM < 0.26
  `[b"", seq, payload]`, end `[b"", ff*8, b""]`.
Anything else is counted (`frame_count`, `bad_seq`) and dropped; payloads that do not decode
are counted by the decoder's reason (`truncated`, `malformed`) and unknown events as
`unknown_event`. A payload that fails to decode still advances the sequence: it was
received, replaying it would give the same bytes.

Instances are keyed by the batch's data-parallel rank (None reads as 0), the `engine` label
vLLM's metrics carry for the same rank. `lock` guards the state between the subscriber
thread and readers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from exporter.kv_events.blocks import DEFAULT_HISTORY, DEFAULT_MAX_BLOCKS, InstanceBlocks
from exporter.kv_events.spec import KvEventsSource
from exporter.kv_events.stream import EventStream
from exporter.kv_events.wire import BatchDecoder, WireError

END_SEQ = b"\xff" * 8
FRAME_REASONS = ("frame_count", "bad_seq", "truncated", "malformed", "unknown_event")


@dataclass(frozen=True, slots=True)
class Limits:
    max_blocks: int = DEFAULT_MAX_BLOCKS  # cached entries per instance and medium
    history: int = DEFAULT_HISTORY  # evicted keys remembered per instance and medium
    max_pending: int = 10_000  # live batches held while a replay runs
    replay_timeout_s: float = 2.0
    rcvhwm: int = 100_000  # the SUB socket's receive high-water mark


class SourceState:
    def __init__(self, source: KvEventsSource, limits: Limits | None = None) -> None:
        self.source = source
        self.limits = limits or Limits()
        self.lock = threading.Lock()
        self.instances: dict[str, InstanceBlocks] = {}
        self.stream = EventStream(
            self._apply, self._restart, source.replay is not None, self.limits.max_pending
        )
        self.decoder = BatchDecoder()
        self.connected = False
        self.disconnects = 0
        self.last_message_t: float | None = None
        self.eras: set[str] = set()

    @property
    def problems(self) -> dict[str, int]:
        return self.stream.problems

    def live_frames(self, frames: list[bytes], t: float) -> int | None:
        """One live message; returns the seq to ask a replay from, or None."""
        self.last_message_t = t
        if len(frames) != 3:
            self.stream.count("frame_count")
            return None
        seq = self._seq(frames[1])
        return None if seq is None else self.stream.live(seq, frames[2])

    def replay_frames(self, frames: list[bytes]) -> bool:
        """One message from the replay socket; True when it was the end marker."""
        if frames and frames[0] == b"":
            frames = frames[1:]
        if len(frames) == 3:
            seq_bytes, payload = frames[1], frames[2]
        elif len(frames) == 2:
            seq_bytes, payload = frames
        else:
            self.stream.count("frame_count")
            return False
        if seq_bytes == END_SEQ:
            self.stream.replay_done(timed_out=False)
            return True
        seq = self._seq(seq_bytes)
        if seq is not None:
            self.stream.replay_batch(seq, payload)
        return False

    def _seq(self, raw: bytes) -> int | None:
        if len(raw) != 8:
            self.stream.count("bad_seq")
            return None
        return int.from_bytes(raw, "big")

    def _apply(self, seq: int, payload: bytes) -> None:
        try:
            batch = self.decoder.decode(payload)
        except WireError as exc:
            self.stream.count(exc.reason)
            return
        if batch.unknown:
            self.stream.count("unknown_event", batch.unknown)
        self.eras.add(batch.era)
        rank = str(batch.rank or 0)
        inst = self.instances.get(rank)
        if inst is None:
            inst = self.instances[rank] = InstanceBlocks(self.limits.max_blocks, self.limits.history)
        inst.apply(batch.events, batch.ts)

    def _restart(self) -> None:
        for inst in self.instances.values():
            inst.reset()
