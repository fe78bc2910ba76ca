"""The aiohttp application: routes, middlewares, and the engine thread's start and stop.

Routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions, GET /health,
GET /metrics. Only /v1/* needs the API key (as in vLLM), so health checks and Prometheus
scrapes work without it.

Middleware order (outermost first): errors -> auth -> draining. So every refusal, including
aiohttp's own 404/405/413, leaves as an OpenAI-format JSON error, and an unauthenticated
client learns nothing about whether the server is draining.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from reference_engine.engine import LLMEngine
from reference_engine.server.engine_loop import ABORT_WAIT_S, EngineLoop
from reference_engine.server.errors import (
    APIError,
    from_http_exception,
    internal_error,
    shutting_down,
    unauthorized,
)
from reference_engine.server.generate import handle_chat, handle_completions
from reference_engine.server.metrics import LiveGauges, VllmMetrics
from reference_engine.server.responses import TokenTexts
from reference_engine.server.state import STATE, ServerConfig, ServerState

log = logging.getLogger("kvscope.server")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except APIError as exc:
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return from_http_exception(exc).response()
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return internal_error().response()


def _auth_middleware(api_key: str) -> Callable:
    expected = f"Bearer {api_key}".encode()

    @web.middleware
    async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/v1"):
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, expected):
                raise unauthorized()
        return await handler(request)

    return auth_middleware


@web.middleware
async def draining_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.app[STATE].draining and request.path.startswith("/v1") and request.method == "POST":
        raise shutting_down()
    return await handler(request)


async def handle_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    card = {
        "id": state.config.served_model_name,
        "object": "model",
        "created": state.created,
        "owned_by": "kvscope",
        "root": state.config.model_source,
        "parent": None,
        "max_model_len": state.max_model_len,
    }
    return web.json_response({"object": "list", "data": [card]})


async def handle_health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.loop is not None and state.loop.failed is not None:
        return web.Response(status=500, text="engine failed\n")
    if state.draining:
        return web.Response(status=503, text="shutting down\n")
    return web.Response(text="")


async def handle_metrics(request: web.Request) -> web.Response:
    body, content_type = request.app[STATE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": content_type})


def live_gauges(engine: LLMEngine) -> LiveGauges:
    """Scrape-time readers. Lengths and the free-block count are single reads, safe while the
    engine thread mutates them."""
    scheduler, pool = engine.scheduler, engine.kv.pool
    return LiveGauges(lambda: len(scheduler.running), lambda: len(scheduler.waiting), pool.usage)


def create_app(
    engine: LLMEngine,
    tokenizer,
    config: ServerConfig,
    cache_info: dict[str, str],
    on_step_start: Callable[[float], None] | None = None,
) -> web.Application:
    """An app serving `engine`. The engine thread starts with the app and stops with it;
    nothing else may touch `engine` while the app runs."""
    metrics = VllmMetrics(
        config.served_model_name,
        engine.max_model_len,
        cache_info,
        live_gauges(engine),
        kv_cache_metrics=engine.kv.pool.residency is not None,
    )
    state = ServerState(
        config=config,
        tokenizer=tokenizer,
        max_model_len=engine.max_model_len,
        vocab_size=engine.vocab_size,
        metrics=metrics,
        token_texts=TokenTexts(tokenizer.decode),
        created=int(time.time()),
    )
    middlewares = [error_middleware]
    if config.api_key:
        middlewares.append(_auth_middleware(config.api_key))
    middlewares.append(draining_middleware)
    app = web.Application(middlewares=middlewares, client_max_size=config.max_body_bytes)
    app[STATE] = state
    app.router.add_get("/v1/models", handle_models)
    app.router.add_post("/v1/completions", handle_completions)
    app.router.add_post("/v1/chat/completions", handle_chat)
    app.router.add_get("/health", handle_health)
    app.router.add_get("/metrics", handle_metrics)

    async def start_engine(app: web.Application) -> None:
        state.loop = EngineLoop(engine, metrics, asyncio.get_running_loop(), on_step_start)
        state.loop.start()

    async def stop_engine(app: web.Application) -> None:
        if state.loop is not None:
            await asyncio.get_running_loop().run_in_executor(None, state.loop.stop)
        engine.close()  # the KV event publisher, once the engine thread has stopped

    app.on_startup.append(start_engine)
    app.on_cleanup.append(stop_engine)
    return app


async def drain(app: web.Application, grace_s: float) -> bool:
    """Stop admitting (503), let in-flight requests finish for up to `grace_s`, then abort the
    rest (their streams end with finish_reason "abort"). True if nothing had to be aborted."""
    state = app[STATE]
    state.draining = True
    loop = state.engine_loop
    deadline = time.monotonic() + grace_s
    while loop.num_in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    clean = loop.num_in_flight == 0
    if not clean:
        log.warning("grace period over: aborting %d in-flight requests", loop.num_in_flight)
        loop.abort_all()
        deadline = time.monotonic() + ABORT_WAIT_S
        while loop.num_in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    return clean
