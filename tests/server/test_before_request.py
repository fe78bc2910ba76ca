"""`GuardedAppRunner(before_request=...)`: called as a request's bytes come in, before aiohttp
parses them (the server routes the engine core's waiting outputs there), once per part of a
request's head, and not for its body or while it is being answered."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from reference_engine.serve_options import HttpLimits
from reference_engine.server.http_guard import GuardedAppRunner
from reference_engine.server.log_limit import RateLimitedLog


async def _exchange(before: list[str]) -> None:
    async def handle(request: web.Request) -> web.Response:
        before.append(f"handle {await request.text()}")
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/", handle)
    log = RateLimitedLog(logging.getLogger("test"))
    runner = GuardedAppRunner(app, HttpLimits(), log, before_request=lambda: before.append("hook"))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for body in (b"one", b"two"):  # two requests on one keep-alive connection
            head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n" % len(body)
            writer.write(head)  # the head in two parts, the body on its own
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.write(body)
            await writer.drain()
            await reader.readuntil(b"ok")
    finally:
        writer.close()
        await runner.cleanup()


def test_the_hook_runs_before_each_request_head_is_parsed_and_not_for_its_body():
    before: list[str] = []
    asyncio.run(_exchange(before))
    assert before == ["hook", "hook", "handle one", "hook", "hook", "handle two"]
