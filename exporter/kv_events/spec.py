"""`--kv-events NAME=tcp://HOST:PORT[,replay=tcp://HOST:PORT][,topic=T][,bind]`, or `NAME=auto`.

NAME is the target whose metrics the events belong to (the same NAME as its `--target`, so
the projected hit ratio can use its prefix-cache counters). The subscriber connects to the
publisher's PUB endpoint (vLLM binds `tcp://*:5557` by default); `bind` makes it bind the
address instead, for a publisher configured to connect (an endpoint without `*`, as
`kvscope run` sets up on loopback). `replay` is the publisher's ROUTER endpoint; without it
a missed batch cannot be recovered and is counted as lost. `topic` is a prefix filter
(default: every topic). `NAME=auto` (or `auto` alone, with one --target) asks the target
where it publishes (`discover`). Stdlib only: the command line parses it without pyzmq.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

AUTO = "auto"
_NAME = re.compile(r"[A-Za-z0-9_.:-]+")
_ENDPOINT = re.compile(r"(tcp://(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9_.*-]+):[0-9]{1,5}|ipc://\S+)")


class KvEventsSpecError(ValueError):
    """A --kv-events value the exporter refuses; the message says what to write instead."""


@dataclass(frozen=True, slots=True)
class KvEventsSource:
    name: str
    endpoint: str
    replay: str | None = None
    topic: str = ""
    bind: bool = False


def _endpoint(text: str, spec: str, what: str) -> str:
    if not _ENDPOINT.fullmatch(text):
        raise KvEventsSpecError(
            f"--kv-events {spec!r}: the {what} must be tcp://HOST:PORT (or ipc://PATH), got {text!r}"
        )
    return text


def parse_source(spec: str) -> KvEventsSource:
    head, sep, rest = spec.strip().partition("=")
    if not sep or "://" in head or not _NAME.fullmatch(head):
        raise KvEventsSpecError(
            f"--kv-events {spec!r}: want NAME=tcp://HOST:PORT[,replay=tcp://HOST:PORT], "
            "NAME being the --target it belongs to"
        )
    endpoint, *options = rest.split(",")
    replay, topic, bind = None, "", False
    for option in options:
        key, has_value, value = option.partition("=")
        if key == "replay" and has_value:
            replay = _endpoint(value, spec, "replay endpoint")
        elif key == "topic" and has_value:
            topic = value
        elif key == "bind" and not has_value:
            bind = True
        else:
            raise KvEventsSpecError(
                f"--kv-events {spec!r}: unknown option {option!r} (known: replay=URL, topic=T, bind)"
            )
    return KvEventsSource(head, _endpoint(endpoint, spec, "endpoint"), replay, topic, bind)


def format_source(source: KvEventsSource) -> str:
    """The --kv-events value `parse_source` reads back as `source`."""
    options = [
        *(["bind"] if source.bind else []),
        *([f"replay={source.replay}"] if source.replay else []),
        *([f"topic={source.topic}"] if source.topic else []),
    ]
    return ",".join([f"{source.name}={source.endpoint}", *options])


def auto_name(spec: str) -> str | None:
    """For `auto` the empty name (the only --target), for `NAME=auto` NAME; None otherwise."""
    head, sep, rest = spec.strip().partition("=")
    if not sep:
        return "" if head == AUTO else None
    return head if rest == AUTO and _NAME.fullmatch(head) else None


def check_unique(sources: list[KvEventsSource]) -> list[KvEventsSource]:
    names = [s.name for s in sources]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise KvEventsSpecError(f"--kv-events names must be unique, repeated: {', '.join(dupes)}")
    return sources


def parse_sources(specs: list[str]) -> list[KvEventsSource]:
    return check_unique([parse_source(s) for s in specs])
