"""What every handler of one server needs, in one record (stored on the aiohttp app).

Passed explicitly instead of living in module globals, so several servers (tests, benchmarks)
can run in one process without sharing anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from reference_engine.core.messages import CoreReady
from reference_engine.server.admission_turns import AdmissionTurns
from reference_engine.server.async_engine import AsyncEngine
from reference_engine.server.metrics import VllmMetrics
from reference_engine.server.responses import TokenTexts


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """`served_model_name` is what clients put in `model` and what metrics carry as
    `model_name`; `model_source` is where the weights came from (shown as `root`; empty: as
    the engine core reports it)."""

    served_model_name: str
    model_source: str = ""
    api_key: str | None = None
    max_body_bytes: int = 8 << 20
    # False: final responses carry no `kvscope` timing object (--no-kvscope-timing).
    timing_object: bool = True
    tracer: Any = None  # server.tracing.RequestTracer with --otlp-traces-endpoint


@dataclass(slots=True)
class ServerState:
    """`engine` is started with the app; the properties below are valid from then on."""

    config: ServerConfig
    tokenizer: Any  # encode / decode / apply_chat_template
    engine: AsyncEngine
    token_texts: TokenTexts
    created: int
    draining: bool = False
    turns: AdmissionTurns = field(default_factory=AdmissionTurns)

    @property
    def ready(self) -> CoreReady:
        if self.engine.ready is None:
            raise RuntimeError("the engine core starts with the app")
        return self.engine.ready

    @property
    def max_model_len(self) -> int:
        return self.ready.max_model_len

    @property
    def vocab_size(self) -> int:
        return self.ready.vocab_size

    @property
    def metrics(self) -> VllmMetrics:
        return self.engine.metrics


STATE: web.AppKey[ServerState] = web.AppKey("kvscope_state", ServerState)
