"""The aiohttp application: routes, middlewares, and the engine core's start and stop.

Routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions, GET /health,
GET /metrics, GET /kv_event_sources (the KV event publisher's config per data-parallel rank,
as vLLM >= 0.32 states it; `{}` without events). Only /v1/* needs the API key (as in vLLM),
so health checks and Prometheus scrapes work without it.

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

from reference_engine.core.client import CoreClient
from reference_engine.server.async_engine import AsyncEngine
from reference_engine.server.errors import (
    APIError,
    engine_dead,
    from_http_exception,
    internal_error,
    shutting_down,
    unauthorized,
)
from reference_engine.server.generate import handle_chat, handle_completions
from reference_engine.server.responses import TokenTexts
from reference_engine.server.state import STATE, ServerConfig, ServerState

log = logging.getLogger("kvscope.server")
# How long the engine core may take to act on aborts (applied between steps, so this bounds
# one step plus the abort bookkeeping), and to shut down.
ABORT_WAIT_S = 5.0
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
    state = request.app[STATE]
    if request.path.startswith("/v1") and request.method == "POST":
        if state.engine.dead:
            raise engine_dead()
        if state.draining:
            raise shutting_down()
    return await handler(request)


async def handle_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    card = {
        "id": state.config.served_model_name,
        "object": "model",
        "created": state.created,
        "owned_by": "kvscope",
        "root": state.config.model_source or state.ready.model_source,
        "parent": None,
        "max_model_len": state.max_model_len,
    }
    return web.json_response({"object": "list", "data": [card]})


async def handle_health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.engine.failed:
        return web.Response(status=500, text="engine failed\n")
    if state.engine.dead:
        return web.Response(status=503, text="engine core stopped\n")
    if state.draining:
        return web.Response(status=503, text="shutting down\n")
    return web.Response(text="")


async def handle_metrics(request: web.Request) -> web.Response:
    body, content_type = request.app[STATE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": content_type})


async def handle_kv_event_sources(request: web.Request) -> web.Response:
    """`{"0": {...}}`: vLLM keys its ranks as strings (a JSON object of its dict[int, config])."""
    stated = request.app[STATE].ready.kv_events_config
    return web.json_response({} if stated is None else {"0": stated})


def create_app(client: CoreClient, tokenizer, config: ServerConfig) -> web.Application:
    """An app serving the engine core behind `client`. The core starts with the app (which
    waits until it is ready) and stops with it."""
    engine = AsyncEngine(client, tokenizer)
    state = ServerState(
        config=config,
        tokenizer=tokenizer,
        engine=engine,
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
    app.router.add_get("/kv_event_sources", handle_kv_event_sources)

    async def start_engine(app: web.Application) -> None:
        await engine.start(config.served_model_name)

    async def stop_engine(app: web.Application) -> None:
        await engine.stop(ABORT_WAIT_S)

    app.on_startup.append(start_engine)
    app.on_cleanup.append(stop_engine)
    return app


async def drain(app: web.Application, grace_s: float) -> bool:
    """Stop admitting (503), let in-flight requests finish for up to `grace_s`, then abort the
    rest (their streams end with finish_reason "abort"). True if nothing had to be aborted."""
    state = app[STATE]
    state.draining = True
    engine = state.engine
    deadline = time.monotonic() + grace_s
    while engine.num_in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    clean = engine.num_in_flight == 0
    if not clean:
        log.warning("grace period over: aborting %d in-flight requests", engine.num_in_flight)
        engine.abort_all()
        deadline = time.monotonic() + ABORT_WAIT_S
        while engine.num_in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
    return clean
