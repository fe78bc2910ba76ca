"""Targets that misbehave on purpose, on loopback, for the exporter's tests and benchmark.

One aiohttp app, one route per kind (`KINDS`), next to a well-behaved vLLM V1 target
(`/normal`, counters moving on every scrape):

- `/garbage`: 8 MiB of random printable lines, not one of them a sample;
- `/gzip-bomb`: 256 MiB of samples gzipped to ~250 KB (refused after the cap);
- `/cardinality`: 50,000 engine instances in ~5.5 MB (the probe's exposition);
- `/trickle`: valid lines, one every 200 ms, for ever (the scrape times out);
- `/negative`: KV usage 7.5, negative running and waiting, hits above queries;
- `/basic`, `/bearer`: 401 unless the request has `USER:PASSWORD` / `TOKEN`;
- `/redirect/same`, `/redirect/other`, `/redirect/loop`: a redirect to `/normal` here, to
  `/normal` on another origin (with credentials written into its Location), to itself.

Every request's path and Authorization header is kept in `seen` (credential tests check
what reached which origin). `python -m tests.support.hostile_targets` serves it on a free
port (the benchmark runs it as its own process, so the exporter's RSS is its own) and
prints `hostile targets on http://127.0.0.1:PORT`.

Stdlib, aiohttp and prometheus_client only (the exporter's slim test environment).
"""

from __future__ import annotations

import asyncio
import base64
import random
import sys
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from aiohttp import web

from tests.support.synthetic_metrics import demo_engines, vllm_v1_exposition

USER, PASSWORD, TOKEN = "scraper", "s3cret-pw", "t0ken-value"
KINDS = ("garbage", "gzip-bomb", "cardinality", "trickle", "negative", "basic", "bearer", "redirect")
MiB = 1 << 20
_BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def garbage(size: int = 8 * MiB, seed: int = 0) -> bytes:
    """Random bytes mapped onto metric-like characters, a newline every ~60 on average."""
    alphabet = b'abcdefghij{}=",# 0123456789_:' * 9  # 279 >= 256 entries; 4 of 256 map to "\n"
    table = bytes(alphabet[i] if i % 64 else 10 for i in range(256))
    return random.Random(seed).randbytes(size).translate(table)


def gzip_bomb(size: int = 256 * MiB) -> bytes:
    block = b'vllm:num_requests_running{engine="0",model_name="m"} 1\n' * (MiB // 56)
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip framing
    parts = [z.compress(block) for _ in range(size // len(block))]
    return b"".join(parts) + z.flush()


def cardinality(instances: int = 50_000) -> bytes:
    rows = []
    for i in range(instances):
        rows.append(f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1')
        rows.append(f'vllm:kv_cache_usage_perc{{engine="{i}",model_name="m"}} 0.5')
    return ("\n".join(rows) + "\n").encode()


def negative() -> str:
    text = vllm_v1_exposition(demo_engines(2, step=5), model="m")
    out = []
    for line in text.splitlines():
        if line.startswith("vllm:kv_cache_usage_perc{") and 'engine="0"' in line:
            line = line.rsplit(" ", 1)[0] + " 7.5"
        elif (
            line.startswith(("vllm:num_requests_running{", "vllm:num_requests_waiting{"))
            and 'engine="1"' in line
        ):
            line = line.rsplit(" ", 1)[0] + " -3.0"
        elif line.startswith("vllm:prefix_cache_hits_total{") and 'engine="1"' in line:
            line = line.rsplit(" ", 1)[0] + " 1e12"
        out.append(line)
    return "\n".join(out) + "\n"


@dataclass
class HostileTargets:
    """The app's state: precomputed bodies, the other origin's URL, what was seen."""

    other_origin: str = ""  # set once the second site listens
    seen: list[tuple[str, str | None]] = field(default_factory=list)
    _step: int = 0
    _bodies: dict[str, bytes] = field(default_factory=dict)

    def body(self, kind: str) -> bytes:
        if kind not in self._bodies:
            self._bodies[kind] = {"garbage": garbage, "gzip-bomb": gzip_bomb, "cardinality": cardinality}[
                kind
            ]()
        return self._bodies[kind]

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/normal", self.normal)
        app.router.add_get("/garbage", self.garbage)
        app.router.add_get("/cardinality", self.cardinality)
        app.router.add_get("/gzip-bomb", self.bomb)
        app.router.add_get("/trickle", self.trickle)
        app.router.add_get("/negative", self.negative)
        app.router.add_get("/basic", self.basic)
        app.router.add_get("/bearer", self.bearer)
        app.router.add_get("/redirect/same", self.redirect_same)
        app.router.add_get("/redirect/loop", self.redirect_loop)
        app.router.add_get("/redirect/other", self.redirect_other)
        return app

    @web.middleware
    async def _record(self, request: web.Request, handler):
        self.seen.append((request.path, request.headers.get("Authorization")))
        del self.seen[:-1000]
        return await handler(request)

    async def normal(self, request: web.Request) -> web.Response:
        self._step += 1
        text = vllm_v1_exposition(demo_engines(2, self._step), model="normal")
        return web.Response(text=text, content_type="text/plain")

    def _bytes(self, kind: str) -> web.Response:
        return web.Response(body=self.body(kind), content_type="text/plain")

    async def garbage(self, request: web.Request) -> web.Response:
        return self._bytes("garbage")

    async def cardinality(self, request: web.Request) -> web.Response:
        return self._bytes("cardinality")

    async def negative(self, request: web.Request) -> web.Response:
        return web.Response(text=negative(), content_type="text/plain")

    async def bomb(self, request: web.Request) -> web.Response:
        headers = {"Content-Encoding": "gzip"}
        return web.Response(body=self.body("gzip-bomb"), headers=headers, content_type="text/plain")

    async def trickle(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_type = "text/plain"
        await resp.prepare(request)
        i = 0
        while True:
            await resp.write(f'vllm:num_requests_running{{engine="{i}",model_name="m"}} 1\n'.encode())
            i += 1
            await asyncio.sleep(0.2)

    async def basic(self, request: web.Request) -> web.Response:
        return await self._guarded(request, _BASIC)

    async def bearer(self, request: web.Request) -> web.Response:
        return await self._guarded(request, f"Bearer {TOKEN}")

    async def _guarded(self, request: web.Request, expected: str) -> web.Response:
        if request.headers.get("Authorization") != expected:
            return web.Response(status=401, text="unauthorized", headers={"WWW-Authenticate": "Basic"})
        return await self.normal(request)

    def _redirect(self, location: str) -> web.Response:
        return web.Response(status=302, headers={"Location": location})

    async def redirect_same(self, request: web.Request) -> web.Response:
        return self._redirect("/normal")

    async def redirect_loop(self, request: web.Request) -> web.Response:
        return self._redirect("/redirect/loop")

    async def redirect_other(self, request: web.Request) -> web.Response:
        scheme, _, rest = self.other_origin.partition("://")
        return self._redirect(f"{scheme}://{USER}:{PASSWORD}@{rest}/normal")


@asynccontextmanager
async def serve_hostile() -> AsyncIterator[tuple[str, HostileTargets]]:
    """(base URL, state) of the hostile app on 127.0.0.1; a second site on another port is
    the "other origin" redirects point to."""
    targets = HostileTargets()
    runner = web.AppRunner(targets.app(), access_log=None)
    await runner.setup()
    sites = [web.TCPSite(runner, "127.0.0.1", 0), web.TCPSite(runner, "127.0.0.1", 0)]
    for site in sites:
        await site.start()
    ports = [address[1] for address in runner.addresses]
    targets.other_origin = f"http://127.0.0.1:{ports[1]}"
    try:
        yield f"http://127.0.0.1:{ports[0]}", targets
    finally:
        await runner.cleanup()


async def _main() -> None:
    async with serve_hostile() as (base, targets):
        for kind in ("garbage", "gzip-bomb", "cardinality"):
            targets.body(kind)  # built before the benchmark starts timing
        print(f"hostile targets on {base}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(_main())
    except KeyboardInterrupt:
        sys.exit(0)
