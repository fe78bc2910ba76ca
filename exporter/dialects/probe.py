"""Probes: extra endpoints a dialect reads beside `/metrics`, for what its exposition lacks.

A dialect that needs one (llama.cpp: GET /slots for KV occupancy and capacity) declares a
`Probe`: the paths, relative to the server's root, and a pure function that folds the
replies into the normalised sample. The scrape loop (`exporter.probe`) fetches the paths next
to each scrape; this module does no I/O. Probes are on by default and switched off with
`--no-probe`; when they are off or fail, the quantities they supply stay unknown and a note
says why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from exporter.dialects.sample import Normalised

KVLayout = Literal["auto", "unified", "per-slot"]
KV_LAYOUTS: tuple[str, ...] = ("auto", "unified", "per-slot")


@dataclass(frozen=True, slots=True)
class ProbeReply:
    """One fetched path: the decoded JSON `body`, or `error` saying why there is none."""

    path: str
    body: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """What the operator states about a server that its endpoints do not say.

    `llamacpp_kv_layout`: llama-server's KV cache is one pool shared by all slots (unified:
    `-kvu`, or `-np` left at auto) or one pool per slot; no endpoint reports which ("auto"
    infers it, see `llamacpp_slots`).
    """

    llamacpp_kv_layout: KVLayout = "auto"


Replies = Mapping[str, ProbeReply]


@dataclass(frozen=True, slots=True)
class ProbeInput:
    """What a caller has for a dialect's probe with one exposition: the fetched `replies`, or
    why there are none (`unprobed`, for the note), and what the operator stated."""

    replies: Replies | None = None
    unprobed: str | None = None
    settings: ProbeSettings = ProbeSettings()


@dataclass(frozen=True, slots=True)
class Probe:
    paths: tuple[str, ...]
    supplies: str  # for notes: what stays unknown without it
    apply: Callable[[Normalised, Replies, ProbeSettings], None]
