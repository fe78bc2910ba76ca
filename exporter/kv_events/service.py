"""Wire a KV event hub into the exporter's web app: its collector beside the exporter's,
`GET /api/v1/kv_events`, the subscriber threads and the per-interval tick (and recording)
started and stopped with the app."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

from aiohttp import web

from exporter.app import EXTRA_COLLECTORS_KEY, RENDER_VERSIONS_KEY
from exporter.kv_events.collector import KvEventsCollector
from exporter.kv_events.hub import KvEventsHub
from exporter.kv_events.record import KvRecorder

HUB_KEY = web.AppKey("kv_events_hub", KvEventsHub)
_TASK_KEY = web.AppKey("kv_events_task", asyncio.Task)
_STOP_KEY = web.AppKey("kv_events_stop", asyncio.Event)


async def kv_events_view(request: web.Request) -> web.Response:
    hub = request.app[HUB_KEY]
    return web.json_response(
        {
            "sources": hub.sources_view(),
            "instances": [v.to_dict() for v in hub.views],
            "notes": [n.to_dict() for n in hub.notes],
        }
    )


def attach(app: web.Application, hub: KvEventsHub, interval_s: float, record_dir: Path | None = None) -> None:
    app[HUB_KEY] = hub
    app[EXTRA_COLLECTORS_KEY].append(KvEventsCollector(hub))  # collected on the render thread
    app[RENDER_VERSIONS_KEY].append(lambda: hub.ticks)
    app.router.add_get("/api/v1/kv_events", kv_events_view)
    recorder = KvRecorder(record_dir) if record_dir is not None else None

    async def start(app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, hub.start)
        app[_STOP_KEY] = asyncio.Event()
        on_tick = (lambda: recorder.write(hub, time.time())) if recorder is not None else None
        app[_TASK_KEY] = asyncio.create_task(hub.run(app[_STOP_KEY], interval_s, on_tick))

    async def stop(app: web.Application) -> None:
        app[_STOP_KEY].set()
        task = app[_TASK_KEY]
        with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        await asyncio.get_running_loop().run_in_executor(None, hub.stop)
        if recorder is not None:
            recorder.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
