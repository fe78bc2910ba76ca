"""`--kv-events auto`: ask the server where it publishes (`GET /kv_event_sources`, vLLM >= 0.32,
and the bundled engine) and turn each stated publisher into a subscription, or into a note
that says exactly what to change.

The server answers one publisher config per data-parallel rank, keys the ranks as strings:
`{"0": {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
"replay_endpoint": "tcp://*:5558", "topic": "kv", ...}}`; `{}` when it publishes nothing.

vLLM's rule for its PUB socket (vllm/distributed/kv_events.py, `_is_bind_endpoint`): an
endpoint with `*` or `::`, or an ipc:// or inproc:// one, is bound; any other tcp:// one
is connected to, so the subscriber must bind it. The replay ROUTER is always bound. Hence:
- a bound tcp endpoint on a wildcard host (`*`, `0.0.0.0`, `::`) is reached at the target's
  host; on a named host, at that host;
- a connected endpoint is bound by kvscope when its address belongs to this machine (and is
  not the server's own loopback seen from another machine); `0.0.0.0` there (no `*`: vLLM
  connects) is the server's own machine, bound here as 127.0.0.1. Otherwise nothing can
  receive the events here, and the note names the `--kv-events-config` change that fixes it.

Every finding carries a stable snake_case `code` beside its text. Stdlib only.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from exporter.kv_events.spec import KvEventsSource

PATH = "/kv_event_sources"
MAX_BODY = 1 << 20
WILDCARD_HOSTS = ("*", "0.0.0.0", "::", "")  # noqa: S104 (hosts a server states, compared)


@dataclass(frozen=True, slots=True)
class Note:
    code: str
    text: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "text": self.text}


@dataclass(frozen=True, slots=True)
class Discovery:
    """What `auto` found for one target: the subscriptions to make, and what to tell the user
    (informational notes too: a bind kvscope makes on the server's behalf is said)."""

    sources: list[KvEventsSource]
    notes: list[Note]
    stated: dict


def sources_url(target_url: str) -> str:
    """`/kv_event_sources` beside the target: `http://h:8000/metrics` and `http://h:8000` both
    give `http://h:8000/kv_event_sources` (a path prefix before `/metrics` is kept)."""
    parts = urllib.parse.urlsplit(target_url)
    path = parts.path.rstrip("/")
    folder = path.rsplit("/", 1)[0] if path.endswith("/metrics") else path
    return urllib.parse.urlunsplit(parts._replace(path=folder + PATH, query="", fragment=""))


def fetch_stated(target_url: str, timeout_s: float = 5.0, authorization: str | None = None) -> dict | Note:
    """The server's per-rank publisher configs, or a Note saying why there are none."""
    url = sources_url(target_url)
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:  # noqa: S310 (the user's target)
            body = resp.read(MAX_BODY + 1)
    except urllib.error.HTTPError as exc:
        return Note(
            "kv_events_sources_unavailable",
            f"the server does not state its KV event publisher (GET {PATH}: HTTP {exc.code}; vLLM states it "
            "from 0.32 on): give the publisher's address instead, --kv-events tcp://HOST:PORT[,replay=...]",
        )
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Note(
            "kv_events_sources_unreachable", f"could not ask the server where it publishes ({url}): {reason}"
        )
    try:
        stated = json.loads(body[:MAX_BODY].decode("utf-8", errors="replace"))
    except ValueError:
        stated = None
    if len(body) > MAX_BODY or not isinstance(stated, dict):
        return Note("kv_events_sources_malformed", f"GET {PATH} did not answer a JSON object of publishers")
    return stated


def is_local_address(host: str) -> bool:
    """True when `host` names an address of this machine: a socket can be bound to it."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), 0, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    for family, kind, proto, _, addr in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                s.bind((addr[0], 0))
            return True
        except OSError:
            continue
    return False


def _is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split_tcp(endpoint: str) -> tuple[str, str] | None:
    """(host, port) of tcp://HOST:PORT (IPv6 in brackets), or None."""
    if not endpoint.startswith("tcp://"):
        return None
    host, sep, port = endpoint[len("tcp://") :].rpartition(":")
    return (host, port) if sep and port.isdigit() else None


def _tcp(host: str, port: str) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host and not host.startswith("[") else f"tcp://{host}:{port}"


def _vllm_binds(endpoint: str) -> bool:
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def _reach(endpoint: str, target_host: str) -> str | None:
    """Where a subscriber here reaches an endpoint the server binds (None: nowhere)."""
    if endpoint.startswith("ipc://"):
        return endpoint  # same machine only; a remote server's ipc path is not here, it stays silent
    parts = _split_tcp(endpoint)
    if parts is None:
        return None
    host, port = parts
    return _tcp(target_host if host.strip("[]") in WILDCARD_HOSTS else host, port)


@dataclass(frozen=True, slots=True)
class _Rank:
    name: str
    target_host: str
    target_local: bool
    config: dict
    is_local: Callable[[str], bool]

    def resolve(self) -> tuple[KvEventsSource | None, list[Note]]:
        c, name = self.config, self.name
        if not c.get("enable_kv_cache_events") or c.get("publisher", "zmq") != "zmq":
            return None, [
                Note(
                    "kv_events_not_published",
                    f"{name}: the server states a KV event config that publishes nothing "
                    f"(enable_kv_cache_events {c.get('enable_kv_cache_events')}, "
                    f"publisher {c.get('publisher')})",
                )
            ]
        endpoint, topic = str(c.get("endpoint") or ""), str(c.get("topic") or "")
        notes: list[Note] = []
        replay = self._replay(c.get("replay_endpoint"), notes)
        if _vllm_binds(endpoint):
            where = _reach(endpoint, self.target_host)
            if where is None:
                return None, [
                    Note(
                        "kv_events_endpoint_unreachable",
                        f"{name}: the server publishes on {endpoint}, which no other process can reach: "
                        'set "endpoint" to tcp://*:PORT in its --kv-events-config',
                    )
                ]
            return KvEventsSource(name, where, replay, topic), notes
        return self._connected(endpoint, replay, topic, notes)

    def _connected(
        self, endpoint: str, replay: str | None, topic: str, notes: list[Note]
    ) -> tuple[KvEventsSource | None, list[Note]]:
        """The server's PUB connects to `endpoint`: a subscriber must bind it."""
        parts = _split_tcp(endpoint)
        port = parts[1] if parts else "5557"
        fix = (
            f'set "endpoint" to tcp://*:{port} in the server\'s --kv-events-config '
            "(it then binds and kvscope connects)"
        )
        if parts is None:
            text = f"{self.name}: cannot use the endpoint {endpoint!r}: {fix}"
            return None, [Note("kv_events_endpoint_unusable", text)]
        host, bind_at = parts[0], endpoint
        if host.strip("[]") in WILDCARD_HOSTS:  # connecting to 0.0.0.0 reaches the server's own machine
            host, bind_at = "127.0.0.1", _tcp("127.0.0.1", port)
        server_loopback = _is_loopback(host) and not self.target_local
        if server_loopback or not self.is_local(host):
            where = "the server's own loopback" if server_loopback else f"{host}, not this machine"
            return None, [
                Note(
                    "kv_events_connect_style",
                    f"{self.name}: the server connects its KV event publisher to {endpoint} ({where}), so no "
                    f"event can reach kvscope here: {fix}",
                )
            ]
        notes.append(
            Note(
                "kv_events_connect_style_bound",
                f"{self.name}: the server connects its KV event publisher to {endpoint} (an endpoint without "
                f"'*'); kvscope binds {bind_at} itself. To let subscribers connect instead, {fix}",
            )
        )
        return KvEventsSource(self.name, bind_at, replay, topic, bind=True), notes

    def _replay(self, replay: object, notes: list[Note]) -> str | None:
        if not isinstance(replay, str) or not replay:
            notes.append(
                Note(
                    "kv_events_no_replay",
                    f"{self.name}: the server has no replay_endpoint: a missed batch cannot be recovered "
                    '(add "replay_endpoint": "tcp://*:PORT" to its --kv-events-config)',
                )
            )
            return None
        where = _reach(replay, self.target_host)
        parts = _split_tcp(replay)
        if where is None or (parts and _is_loopback(parts[0]) and not self.target_local):
            notes.append(
                Note(
                    "kv_events_replay_unreachable",
                    f"{self.name}: the replay endpoint {replay} cannot be reached from here: missed batches "
                    'are lost (set "replay_endpoint" to tcp://*:PORT)',
                )
            )
            return None
        return where


def resolve(
    name: str, target_url: str, stated: dict, is_local: Callable[[str], bool] = is_local_address
) -> Discovery:
    """Subscriptions for the publishers `stated` (GET /kv_event_sources) by the server at
    `target_url`. Rank 0 keeps `name` (the --target the events belong to); rank r is `name-r`."""
    host = urllib.parse.urlsplit(target_url).hostname or "127.0.0.1"
    if not stated:
        return Discovery(
            [],
            [
                Note(
                    "kv_events_not_enabled",
                    f"{name}: the server publishes no KV events: start it with --kv-events-config "
                    '\'{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", '
                    '"replay_endpoint": "tcp://*:5558"}\'',
                )
            ],
            stated,
        )
    sources, notes = [], []
    target_local = _is_loopback(host) or is_local(host)
    for rank in sorted(stated, key=lambda r: (len(str(r)), str(r))):
        config = stated[rank]
        rank_name = name if str(rank) == "0" else f"{name}-{rank}"
        if not isinstance(config, dict):
            text = f"{rank_name}: rank {rank}'s config is not an object"
            notes.append(Note("kv_events_sources_malformed", text))
            continue
        source, found = _Rank(rank_name, host, target_local, config, is_local).resolve()
        notes += found
        if source is not None:
            sources.append(source)
    return Discovery(sources, notes, stated)
