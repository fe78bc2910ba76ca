"""What every handler of one server needs, in one record (stored on the aiohttp app).

Passed explicitly instead of living in module globals, so several servers (tests, benchmarks)
can run in one process without sharing anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from reference_engine.server.engine_loop import EngineLoop
from reference_engine.server.metrics import VllmMetrics
from reference_engine.server.responses import TokenTexts


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """`served_model_name` is what clients put in `model` and what metrics carry as
    `model_name`; `model_source` is where the weights came from (shown as `root`)."""

    served_model_name: str
    model_source: str
    api_key: str | None = None
    max_body_bytes: int = 8 << 20


@dataclass(slots=True)
class ServerState:
    config: ServerConfig
    tokenizer: Any  # encode / decode / apply_chat_template
    max_model_len: int
    vocab_size: int
    metrics: VllmMetrics
    token_texts: TokenTexts
    created: int
    loop: EngineLoop | None = None  # set at startup, when the event loop exists
    draining: bool = False

    @property
    def engine_loop(self) -> EngineLoop:
        if self.loop is None:
            raise RuntimeError("the engine loop starts with the app")
        return self.loop


STATE: web.AppKey[ServerState] = web.AppKey("kvscope_state", ServerState)
