"""`kvscope run --kv-events`: the block-level view of the run's server.

Bundled engine: kvscope picks two free loopback ports and starts the engine with vLLM's
`--kv-events-config`, its PUB socket connecting to the first (an endpoint without `*`, so
it connects) and its replay ROUTER bound on the second; the exporter binds the first
(`,bind`) and subscribes. Nothing listens beyond 127.0.0.1. With --target the user gives the
server's endpoints (`tcp://HOST:PORT[,replay=tcp://HOST:PORT]`, repeatable for replicas);
the first belongs to the target the exporter scrapes, further ones are named NAME-1, NAME-2.
Or `auto`: the run asks the target where it publishes (`GET /kv_event_sources`) before the
exporter starts, says what it found, and gives the exporter the resolved addresses (a
publisher that connects to an address of this machine is bound by the exporter).
"""

from __future__ import annotations

import json

from exporter.kv_events.spec import format_source
from exporter.kv_events.subscriptions import discover
from harness.run.procs import free_port

AUTO = "auto"  # --kv-events without a value: set up by kvscope (bundled) or asked of the --target
TOPIC = "kv-events"
LOOPBACK = "127.0.0.1"


def bundled(name: str) -> tuple[list[str], list[str]]:
    """(the engine's extra flags, the exporter's --kv-events values) on fresh loopback ports."""
    pub, replay = free_port(LOOPBACK), free_port(LOOPBACK)
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://{LOOPBACK}:{pub}",
        "replay_endpoint": f"tcp://{LOOPBACK}:{replay}",
        "topic": TOPIC,
    }
    engine = ["--kv-events-config", json.dumps(config, separators=(",", ":"))]
    return engine, [f"{name}=tcp://{LOOPBACK}:{pub},bind,replay=tcp://{LOOPBACK}:{replay},topic={TOPIC}"]


def for_target(name: str, endpoints: list[str]) -> list[str]:
    """The exporter's --kv-events values for a --target run's given endpoints."""
    return [f"{name if i == 0 else f'{name}-{i}'}={e}" for i, e in enumerate(endpoints)]


def subscribe(name: str, target_url: str, given: list[str]) -> tuple[list[str], list[dict], dict]:
    """A --target's (the exporter's --kv-events values, notes as {code, text}, what the
    target stated): the endpoints given, or with auto what the target states."""
    if given != [AUTO]:
        return for_target(name, given), [], {}
    found = discover(name, target_url)
    return [format_source(s) for s in found.sources], [n.to_dict() for n in found.notes], found.stated
