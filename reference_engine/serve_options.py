"""What `kvscope engine serve` is told besides the engine and the simulation (`ServeOptions`).

Stdlib only, so the flags can be built (`reference_engine.engine_args`) without aiohttp. It
lives beside the other config types rather than in `server/`: the command in `server/`
imports `engine_args`, which imports this.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from reference_engine.arg_field import arg_field

API_KEY_ENV = "KVSCOPE_API_KEY"
# How long in-flight requests may run after SIGTERM before they are aborted.
DEFAULT_SHUTDOWN_GRACE_S = 10.0
# Slow-client limits (`reference_engine.server.http_guard`). Request headers: HAProxy's advised
# `timeout http-request`. A body (at most 8 MiB, usually a few KiB) must arrive within 30 s of
# its headers, a total rather than a per-read limit, so a trickle cannot hold a connection.
# Idle keep-alive: longer than the 60 s idle timeout of common load balancers, so the server
# never closes a connection a proxy is about to reuse. Connections: above the 1,500 concurrent
# streams one simulated server is benchmarked at.
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_KEEP_ALIVE_TIMEOUT_S = 75.0
DEFAULT_MAX_CONNECTIONS = 4096

LogLevel = Literal["debug", "info", "warning", "error"]
# process: the engine core in a process of its own (vLLM V1's design). thread: on a thread of
# the server process (one process to profile or debug; the event loop then shares the
# interpreter with every step).
EngineCoreMode = Literal["process", "thread"]


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """The server's own flags. `api_key` is kept out of the repr: it must never be logged."""

    host: str = arg_field(
        "127.0.0.1", "address to bind; 0.0.0.0 exposes the server to the network (default: %(default)s)"
    )
    port: int = arg_field(8000, "TCP port; 0 picks a free one (default: %(default)s)")
    served_model_name: str | None = arg_field(
        None,
        "name clients send as 'model' and metrics carry as model_name "
        "(default: --model, or --sim-model with --simulate)",
    )
    api_key: str | None = arg_field(
        None,
        f"require 'Authorization: Bearer KEY' on /v1/* (also ${API_KEY_ENV}); "
        "prefer --api-key-file, since arguments are visible to other local users",
        repr=False,
    )
    api_key_file: str | None = arg_field(None, "read the API key from this file (first line)")
    shutdown_grace: float = arg_field(
        DEFAULT_SHUTDOWN_GRACE_S,
        "on SIGTERM, how long in-flight requests may run before they are aborted (default: %(default)s)",
        metavar="SECONDS",
    )
    header_timeout: float = arg_field(
        DEFAULT_HEADER_TIMEOUT_S,
        "answer 408 and close when request headers are not complete this long after the "
        "connection opened, or after the first byte of its next request (default: %(default)s)",
        metavar="SECONDS",
    )
    body_timeout: float = arg_field(
        DEFAULT_BODY_TIMEOUT_S,
        "answer 408 and close when a request body is not complete this long after its headers "
        "(default: %(default)s)",
        metavar="SECONDS",
    )
    keep_alive_timeout: float = arg_field(
        DEFAULT_KEEP_ALIVE_TIMEOUT_S,
        "close an idle keep-alive connection after this long; keep it above your load balancer's idle "
        "timeout (default: %(default)s)",
        metavar="SECONDS",
    )
    max_connections: int = arg_field(
        DEFAULT_MAX_CONNECTIONS,
        "open connections at most; one more is answered 503 and closed (default: %(default)s)",
        metavar="N",
    )
    engine_core: EngineCoreMode = arg_field(
        "process",
        "where the engine core (scheduler, KV cache, model) runs: its own process, or a thread of the "
        "server process for profiling and debugging (default: %(default)s)",
    )
    access_log: bool = arg_field(False, "log one line per HTTP request")
    # Per-request spans, as vLLM's flag of the same name (reference_engine/server/tracing.py).
    otlp_traces_endpoint: str | None = arg_field(
        None,
        "export an OpenTelemetry span per request (vLLM's `llm_request`) to this OTLP endpoint: "
        "host:port for gRPC (the default, as in vLLM; needs opentelemetry-exporter-otlp-proto-grpc), or "
        "the full URL with /v1/traces when OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf",
        metavar="URL",
    )
    no_kvscope_timing: bool = arg_field(
        False,
        "leave the 'kvscope' timing object out of final responses (and the x-kvscope-timing header), "
        "so a client sees only what a production engine gives",
    )
    log_level: LogLevel = arg_field("info", "(default: %(default)s)")

    def http_limits(self) -> HttpLimits:
        return HttpLimits(
            self.header_timeout, self.body_timeout, self.keep_alive_timeout, self.max_connections
        )


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What `reference_engine.server.http_guard` enforces on each connection; every value is
    positive (seconds, or a count)."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    keep_alive_timeout_s: float = DEFAULT_KEEP_ALIVE_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_timeout_s", "max_connections"):
            if not getattr(self, name) > 0:
                flag = "--" + name.removesuffix("_s").replace("_", "-")
                raise ValueError(f"{flag} must be positive, got {getattr(self, name)!r}")


def read_api_key(options: ServeOptions) -> str | None:
    """--api-key, --api-key-file or $KVSCOPE_API_KEY (at most one of the first two)."""
    if options.api_key and options.api_key_file:
        raise ValueError("give --api-key or --api-key-file, not both")
    if options.api_key_file:
        with open(options.api_key_file, encoding="utf-8") as f:
            key = f.readline().strip()
        if not key:
            raise ValueError(f"{options.api_key_file}: the API key file is empty")
        return key
    return options.api_key or os.environ.get(API_KEY_ENV) or None
