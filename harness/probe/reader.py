"""Reading a server's KV pool once: its `/metrics` through the exporter's dialects (the same
normalisation the sidecar uses, so every engine kvscope knows is read the same way), plus
the endpoints a dialect probes beside it (llama.cpp's `/slots`, where the occupancy is).

`PoolReader.read()` returns the canonical reading and keeps the last exposition and probe
replies, from which `stated` takes the server's own description of its pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import aiohttp

from exporter.defaults import DEFAULT_MAX_BYTES
from exporter.dialects import normalise, probe_for
from exporter.dialects.common import FamilyIndex
from exporter.dialects.detect import detect
from exporter.dialects.probe import KVLayout, ProbeInput, ProbeReply, ProbeSettings
from exporter.parse import Exposition, parse_exposition
from exporter.probe import fetch_replies
from harness.probe.observation import PoolReading

READ_TIMEOUT_S = 10.0


class ReadError(Exception):
    """The pool could not be read at all (no /metrics answer)."""


@dataclass(slots=True)
class PoolReader:
    session: aiohttp.ClientSession
    base_url: str
    headers: dict[str, str] = field(default_factory=dict)
    kv_layout: KVLayout = "auto"
    dialect: str | None = None
    exposition: Exposition | None = None
    replies: dict[str, ProbeReply] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    capacity_tokens: float | None = None  # the dialect's pool size, where it states one

    async def _metrics(self) -> Exposition:
        try:
            async with self.session.get(
                self.base_url + "/metrics",
                headers=self.headers,
                timeout=aiohttp.ClientTimeout(READ_TIMEOUT_S),
            ) as resp:
                if resp.status != 200:
                    raise ReadError(f"GET /metrics answered HTTP {resp.status}")
                return parse_exposition(await resp.text(errors="replace"))
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ReadError(f"GET /metrics failed: {exc!r}") from None

    async def read(self) -> PoolReading:
        """One reading; ReadError when /metrics does not answer."""
        exp = await self._metrics()
        if self.dialect is None:
            self.dialect = detect(FamilyIndex(exp))
        probe = probe_for(self.dialect)
        probe_input = None
        if probe is not None:
            auth = self.headers.get("Authorization")
            self.replies = await fetch_replies(
                self.session, self.base_url + "/metrics", probe.paths, READ_TIMEOUT_S, DEFAULT_MAX_BYTES, auth
            )
            probe_input = ProbeInput(self.replies, settings=ProbeSettings(self.kv_layout))
        norm = normalise(exp, self.dialect or "auto", probe_input)
        self.exposition, self.notes = exp, norm.notes
        sample = norm.instances[0] if norm.instances else None
        if sample is None:
            return PoolReading()
        self.capacity_tokens = sample.kv_capacity_tokens
        return PoolReading(
            sample.kv_usage_ratio, sample.requests_running, sample.requests_waiting, sample.preemptions
        )

    def reply_body(self, path: str) -> Any:
        reply = self.replies.get(path)
        return None if reply is None or reply.error else reply.body

    def slot_layout(self, slots: tuple[int, ...]) -> str | None:
        """llama.cpp's pool layout as the dialect took it: a unified pool is one slot's n_ctx,
        per-slot pools their sum (`exporter.dialects.llamacpp_slots`)."""
        if not slots or self.capacity_tokens is None:
            return None
        return "unified" if len(slots) > 1 and self.capacity_tokens == max(slots) else "per-slot"
