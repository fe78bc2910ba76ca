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
    engine_core: EngineCoreMode = arg_field(
        "process",
        "where the engine core (scheduler, KV cache, model) runs: its own process, or a thread of the "
        "server process for profiling and debugging (default: %(default)s)",
    )
    access_log: bool = arg_field(False, "log one line per HTTP request")
    log_level: LogLevel = arg_field("info", "(default: %(default)s)")


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
