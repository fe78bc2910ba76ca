"""aiohttp application: /metrics, /api/v1/targets, /api/v1/samples, /healthz.

The scrape loop runs as a background task of the app (started on startup, cancelled on
cleanup), so the HTTP side and the loop share one event loop and one Exporter object.
Whatever grows with what targets send is done off the loop on the exporter's worker
threads: rendering /metrics (from a snapshot, shared by concurrent requests and reused
until the next scrape) and serialising /api/v1/samples. /healthz never waits for either.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from typing import Any

from aiohttp import web
from prometheus_client.exposition import choose_encoder

from exporter.collector import render, snapshot
from exporter.runner import Exporter, TargetState
from exporter.series import Point

EXPORTER_KEY = web.AppKey("exporter", Exporter)
TASK_KEY = web.AppKey("loop_task", asyncio.Task)
STOP_KEY = web.AppKey("stop", asyncio.Event)
# {(content type, exporter ingests, other sources' versions): the rendering's future}: one
# render per new state
RENDERED_KEY = web.AppKey("rendered", dict)
# Other sources of /metrics content (the KV event hub): collectors rendered beside the
# exporter's, and version counters, so a rendering is reused only until any of them moves.
EXTRA_COLLECTORS_KEY = web.AppKey("extra_collectors", list)
RENDER_VERSIONS_KEY = web.AppKey("render_versions", list)


def _clean(x: Any) -> Any:
    """JSON-safe copy: NaN/Inf become null (JSON has neither)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def _dumps(data: Any) -> str:
    return json.dumps(_clean(data), allow_nan=False)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=_dumps(data), status=status, content_type="application/json")


def target_view(st: TargetState) -> dict[str, Any]:
    latest = st.series.latest()
    return {
        "name": st.target.name,
        "url": st.target.url,  # never holds credentials (scrape.parse_target)
        "auth": st.target.credentials.describe() if st.target.credentials else None,
        "up": st.up,
        "over_limit": st.over_limit,
        "scrapes": st.scrapes,
        "last_scrape": latest.t if latest else None,
        "last_duration_seconds": st.last_duration,
        "last_reason": latest.reason if latest else None,
        "last_detail": st.last_detail,
        "errors": {k: v for k, v in st.errors.items() if v},
        "dialect": st.dialect,
        "variant": st.variant,
        "notes": st.notes,
        "parse": st.parse_stats,
        "instances": [{"model": k[0], "instance": k[1], **d.to_dict()} for k, d in st.derived.items()],
    }


def point_view(p: Point) -> dict[str, Any]:
    return {
        "t": p.t,
        "up": p.up,
        "reason": p.reason,
        "instances": [s.to_dict() for s in p.instances.values()],
    }


async def metrics(request: web.Request) -> web.Response:
    """Rendered on a worker thread from a snapshot taken here; concurrent requests for the
    same state share the rendering, which is redone only after the next ingest."""
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    exporter = request.app[EXPORTER_KEY]
    cache = request.app[RENDERED_KEY]
    key = (content_type, exporter.ingests, *(v() for v in request.app[RENDER_VERSIONS_KEY]))
    rendering = cache.get(key)
    if rendering is None:
        extra = tuple(request.app[EXTRA_COLLECTORS_KEY])
        rendering = asyncio.ensure_future(exporter.in_worker(render, snapshot(exporter), encoder, extra))
        cache.clear()
        cache[key] = rendering
    body = await asyncio.shield(rendering)  # a client that leaves does not cancel it for the others
    resp = web.Response(body=body)
    resp.headers["Content-Type"] = content_type
    return resp


async def targets(request: web.Request) -> web.Response:
    return _json({"targets": [target_view(st) for st in request.app[EXPORTER_KEY].states]})


async def samples(request: web.Request) -> web.Response:
    exporter = request.app[EXPORTER_KEY]
    name = request.query.get("target")
    try:
        since = float(request.query.get("since", "0"))
    except ValueError:
        return _json({"error": "since must be a Unix timestamp in seconds"}, 400)
    states = exporter.states
    if name is not None:
        st = exporter.state(name)
        if st is None:
            return _json(
                {"error": f"unknown target {name!r}", "targets": [s.target.name for s in states]}, 404
            )
        states = [st]
    picked = [(st.target.name, st.dialect, st.series.since(since)) for st in states]
    text = await exporter.in_worker(_samples_json, picked)
    return web.Response(text=text, content_type="application/json")


def _samples_json(picked: list[tuple[str, str | None, list[Point]]]) -> str:
    return _dumps(
        {
            "targets": [
                {"target": name, "dialect": dialect, "samples": [point_view(p) for p in points]}
                for name, dialect, points in picked
            ]
        }
    )


async def healthz(request: web.Request) -> web.Response:
    states = request.app[EXPORTER_KEY].states
    return _json({"status": "ok", "targets": len(states), "up": sum(st.up for st in states)})


async def _start_loop(app: web.Application) -> None:
    app[STOP_KEY] = asyncio.Event()
    app[TASK_KEY] = asyncio.create_task(app[EXPORTER_KEY].run(app[STOP_KEY]))


async def _stop_loop(app: web.Application) -> None:
    app[STOP_KEY].set()
    task = app[TASK_KEY]
    try:
        await asyncio.wait_for(task, 5)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    app[EXPORTER_KEY].close()


def make_app(exporter: Exporter, run_loop: bool = True) -> web.Application:
    """The exporter's web app. `run_loop=False` leaves scraping to the caller (tests)."""
    app = web.Application()
    app[EXPORTER_KEY] = exporter
    app[RENDERED_KEY] = {}
    app[EXTRA_COLLECTORS_KEY] = []
    app[RENDER_VERSIONS_KEY] = []
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/v1/targets", targets)
    app.router.add_get("/api/v1/samples", samples)
    app.router.add_get("/healthz", healthz)
    if run_loop:
        app.on_startup.append(_start_loop)
        app.on_cleanup.append(_stop_loop)
    return app
