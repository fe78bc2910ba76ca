"""`--kv-events-config '<json>'`: vLLM's `KVEventsConfig`, same keys, same defaults.

    {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
     "replay_endpoint": "tcp://*:5558", "buffer_steps": 10000, "hwm": 100000,
     "max_queue_size": 100000, "topic": ""}

`publisher` defaults to "zmq" when events are enabled, else "null" (vLLM's __post_init__).
The PUB socket binds when the endpoint has `*` or `::` or is ipc:// or inproc://, and
connects otherwise (a subscriber that binds, e.g. a sidecar on loopback); the replay ROUTER
always binds. Unknown keys and wrong types are refused, as vLLM's config validation does.
Stdlib only: the engine's configuration validates the flag without importing ZeroMQ.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields

PUBLISHERS = ("null", "zmq")


class KVEventsConfigError(ValueError):
    """A --kv-events-config value that cannot work; the message says which key."""


@dataclass(frozen=True, slots=True)
class KVEventsConfig:
    enable_kv_cache_events: bool = False
    publisher: str | None = None  # None: "zmq" if enabled else "null"
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000  # batches kept for replay
    hwm: int = 100_000  # PUB send high-water mark; beyond it ZeroMQ drops messages
    max_queue_size: int = 100_000  # scheduler -> publisher thread queue
    topic: str = ""

    @property
    def publisher_name(self) -> str:
        return self.publisher or ("zmq" if self.enable_kv_cache_events else "null")

    @property
    def publishes(self) -> bool:
        """Events are recorded and sent: enabled, with the zmq publisher."""
        return self.enable_kv_cache_events and self.publisher_name == "zmq"


_TYPES: dict[str, tuple[type, ...]] = {
    "enable_kv_cache_events": (bool,),
    "publisher": (str, type(None)),
    "endpoint": (str,),
    "replay_endpoint": (str, type(None)),
    "buffer_steps": (int,),
    "hwm": (int,),
    "max_queue_size": (int,),
    "topic": (str,),
}


def parse_kv_events_config(text: str) -> KVEventsConfig:
    """The config from the flag's JSON; KVEventsConfigError naming the bad key otherwise."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise KVEventsConfigError(f"--kv-events-config is not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise KVEventsConfigError("--kv-events-config must be a JSON object")
    known = {f.name for f in fields(KVEventsConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise KVEventsConfigError(
            f"--kv-events-config: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    for key, value in raw.items():
        kinds = _TYPES[key]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
            raise KVEventsConfigError(f"--kv-events-config: {key} must be {names}, got {value!r}")
    config = KVEventsConfig(**raw)
    if config.publisher_name not in PUBLISHERS:
        raise KVEventsConfigError(
            f"--kv-events-config: publisher must be one of {', '.join(PUBLISHERS)}, got {config.publisher!r}"
        )
    for key in ("buffer_steps", "hwm", "max_queue_size"):
        if getattr(config, key) < 0:
            raise KVEventsConfigError(f"--kv-events-config: {key} must be >= 0")
    if config.publishes:
        for key in ("endpoint", "replay_endpoint"):
            endpoint = getattr(config, key)
            if endpoint is not None and not endpoint.startswith(("tcp://", "ipc://", "inproc://")):
                raise KVEventsConfigError(
                    f"--kv-events-config: {key} must be a tcp://, ipc:// or inproc:// address, "
                    f"got {endpoint!r}"
                )
    return config


def binds(endpoint: str) -> bool:
    """vLLM's rule for the PUB socket: bind a wildcard or local transport, connect otherwise."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def offset_endpoint(endpoint: str | None, data_parallel_rank: int) -> str | None:
    """Data-parallel rank r publishes on the tcp port + r (`inproc://x` becomes `inproc://x_dp<r>`);
    port 0 (any free port) stays 0. An ipc:// endpoint cannot be shared by ranks > 0."""
    if not endpoint or data_parallel_rank == 0:
        return endpoint
    if "inproc" in endpoint:
        return f"{endpoint}_dp{data_parallel_rank}"
    if "tcp" in endpoint:
        base, _, port = endpoint.rpartition(":")
        if not port.isdigit():
            return endpoint
        return f"{base}:{int(port) + data_parallel_rank if int(port) else 0}"
    raise KVEventsConfigError("endpoint must contain 'inproc' or 'tcp' for data-parallel ranks > 0")
