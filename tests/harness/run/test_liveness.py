"""The run's target watch: a probe only after a new connection failure (at most one a second),
the target lost only when neither /health nor /v1/models gives any HTTP answer; a bundled
engine whose process exited is lost without a probe."""

from __future__ import annotations

import asyncio

from aiohttp import web

from harness.run.liveness import LOST_CODE, TargetWatch
from harness.run.procs import free_port
from tests.support.prometheus import serve_app


def _with_server(check) -> None:
    async def health(request: web.Request) -> web.Response:
        return web.Response(status=503)  # unhealthy is still an answer

    app = web.Application()
    app.router.add_get("/health", health)

    async def go():
        async with serve_app(app) as url:
            await asyncio.to_thread(check, url)

    asyncio.run(go())


def test_a_server_that_answers_is_never_lost() -> None:
    def check(url: str) -> None:
        watch = TargetWatch(url)
        assert not watch.check(0, 0.0)  # no failure: no probe
        assert not watch.check(3, 1.0) and watch.seen == 3 and watch.lost is None
        assert not watch.check(5, 1.5) and watch.seen == 3  # a second probe waits a second

    _with_server(check)


def test_a_server_that_is_gone_is_lost_once() -> None:
    watch = TargetWatch(f"http://127.0.0.1:{free_port()}")
    assert not watch.check(0, 0.0)
    assert watch.check(2, 5.0) and watch.lost is not None
    assert not watch.check(9, 10.0)  # said once
    lost = watch.lost.to_json(watch.lost.at_unix - 12.0)
    assert lost["code"] == LOST_CODE and lost["after_s"] == 12.0 and lost["connection_failures_before"] == 2
    assert "refused" in lost["reason"] and lost["text"].startswith("the target stopped answering 12.0 s into")


def test_an_exited_engine_is_lost_without_a_probe() -> None:
    watch = TargetWatch("http://127.0.0.1:1")
    assert watch.check(0, 0.5, engine_exited="the engine exited with status -9")
    assert watch.lost is not None and watch.lost.reason == "the engine exited with status -9"
    assert watch.seen == 0 and watch.last_probe < 0  # no probe was made
