"""Every `--kv-events` value of one exporter as subscriptions: explicit addresses parsed as
given, `auto` / `NAME=auto` asked of the named target (`discover`). What `auto` finds that
keeps events from flowing, or that kvscope did on the server's behalf, comes back as notes
(code and text) for the caller to show; a value that cannot mean anything raises
KvEventsSpecError. Stdlib only."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.kv_events.discover import Discovery, Note, fetch_stated, resolve
from exporter.kv_events.spec import KvEventsSource, KvEventsSpecError, auto_name, check_unique, parse_source

DISCOVERY_TIMEOUT_S = 5.0


def discover(name: str, target_url: str, authorization: str | None = None) -> Discovery:
    """Ask the target where it publishes and resolve the answer (a Note when it cannot say)."""
    stated = fetch_stated(target_url, DISCOVERY_TIMEOUT_S, authorization)
    if isinstance(stated, Note):
        return Discovery([], [Note(stated.code, f"{name}: {stated.text}")], {})
    return resolve(name, target_url, stated)


def subscriptions(
    specs: list[str], targets: Mapping[str, str], authorization: Mapping[str, str | None] | None = None
) -> tuple[list[KvEventsSource], list[Note]]:
    """`targets`: each --target's name and URL; `authorization`: a target's header value."""
    sources: list[KvEventsSource] = []
    notes: list[Note] = []
    for spec in specs:
        name = auto_name(spec)
        if name is None:
            sources.append(parse_source(spec))
            continue
        if not name:
            if len(targets) != 1:
                raise KvEventsSpecError(
                    f"--kv-events auto: name the target, NAME=auto (targets: {', '.join(targets)})"
                )
            (name,) = targets
        if name not in targets:
            raise KvEventsSpecError(f"--kv-events {spec!r}: no --target is named {name!r}")
        found = discover(name, targets[name], (authorization or {}).get(name))
        sources += found.sources
        notes += found.notes
    return check_unique(sources), notes
