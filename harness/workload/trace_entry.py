"""One request of a trace, whatever format it came in (`traces`, `azure_trace`)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

MOONCAKE_BLOCK_TOKENS = 512  # tokens per hash id in Mooncake's published traces


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """`arrival_s` counts from the trace's first request; lengths are in tokens (>= 1);
    `hash_ids` name the prompt's shared blocks (Mooncake), empty when the trace has none.
    `session_id` / `turn`: the conversation the request belongs to and its place in it
    (0-based, consecutive), None for a request on its own."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    session_id: str | None = None
    turn: int | None = None

    @property
    def shard(self) -> int | None:
        """Which worker sends it (modulo the worker count): one per session, so a session's
        turns stay in one process and in order (`arrivals.ArrivalSchedule`); None: any."""
        return None if self.session_id is None else zlib.crc32(self.session_id.encode("utf-8", "replace"))
