"""Misbehaving targets, served by small local aiohttp servers on 127.0.0.1.

Each fault is counted under its reason, marks the target down when nothing usable came
back (and only then), and the scrape loop keeps going for every other target.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from pathlib import Path

import pytest
from aiohttp import web

from exporter.runner import Exporter, Options
from exporter.scrape import ScrapeResult, Target, TargetError, make_session, parse_target
from tests.support.prometheus import free_port, serve_app
from tests.support.wait import wait_until

DATA = Path(__file__).parent / "data" / "metrics"
VLLM = (DATA / "synthetic_vllm_0.11_v1_dp2_cache_config.prom").read_text()
MiB = 1 << 20


def fault_app() -> web.Application:
    def text(body: str, ctype: str = "text/plain", status: int = 200):
        async def handler(request: web.Request) -> web.Response:
            return web.Response(text=body, content_type=ctype, status=status)

        return handler

    async def slow_body(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.content_type = "text/plain"
        await resp.prepare(request)
        for line in VLLM.splitlines(keepends=True)[:20]:
            await resp.write(line.encode())
            await asyncio.sleep(0.2)
        return resp

    async def slow_headers(request: web.Request) -> web.Response:
        await asyncio.sleep(3)
        return web.Response(text=VLLM)

    async def gzipped(request: web.Request) -> web.Response:
        return web.Response(
            body=gzip.compress(VLLM.encode()), headers={"Content-Encoding": "gzip"}, content_type="text/plain"
        )

    async def gzip_no_header(request: web.Request) -> web.Response:  # a .gz file served as-is
        return web.Response(body=gzip.compress(VLLM.encode()), content_type="application/octet-stream")

    async def deflated(request: web.Request) -> web.Response:
        return web.Response(body=zlib.compress(VLLM.encode()), headers={"Content-Encoding": "deflate"})

    async def brotli(request: web.Request) -> web.Response:
        return web.Response(body=b"\x8b\x00\x80", headers={"Content-Encoding": "br"})

    async def gzip_corrupt(request: web.Request) -> web.Response:
        return web.Response(body=b"\x1f\x8bnot gzip at all", headers={"Content-Encoding": "gzip"})

    async def gzip_bomb(request: web.Request) -> web.Response:
        return web.Response(body=gzip.compress(b"a 1\n" * (5 * MiB)), headers={"Content-Encoding": "gzip"})

    async def oversize_chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()  # no Content-Length: the cap must hold while streaming
        await resp.prepare(request)
        line = b'vllm:num_requests_running{engine="0",model_name="m"} 1\n' * 1000
        for _ in range(12 * MiB // len(line) + 1):
            await resp.write(line)
        return resp

    async def broken(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Length": "100000"})
        await resp.prepare(request)
        await resp.write(VLLM[:500].encode())
        request.transport.abort()  # hang up mid-body
        return resp

    malformed = "\n".join(ln if i % 7 else ln + " garbage {{" for i, ln in enumerate(VLLM.splitlines()))
    duplicated = VLLM + "\n".join(ln for ln in VLLM.splitlines() if "num_requests_running" in ln) + "\n"
    nan = VLLM.replace(
        'vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.75',
        'vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} NaN',
    ).replace(
        'vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.0',
        'vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen2.5-7B-Instruct"} +Inf',
    )
    routes = {
        "/ok": text(VLLM),
        "/500": text("boom", status=500),
        "/404": text("no such page", status=404),
        "/html": text("<!doctype html><html><body>login</body></html>", "text/html"),
        "/json": text('{"kvCacheStats": {"maxNumBlocks": 10}}', "application/json"),
        "/json-as-text": text('[{"iter": 1}]'),
        "/empty": text(""),
        "/garbage": text("\x00\x01\x02 binary\nstuff here\n"),
        "/gzip-corrupt": gzip_corrupt,
        "/gzip-no-header": gzip_no_header,
        "/deflate": deflated,
        "/br": brotli,
        "/oversize": text("a 1\n" * (3 * MiB)),
        "/malformed": text(malformed),
        "/duplicates": text(duplicated),
        "/nan": text(nan),
        "/slow-body": slow_body,
        "/slow-headers": slow_headers,
        "/gzip": gzipped,
        "/gzip-bomb": gzip_bomb,
        "/oversize-chunked": oversize_chunked,
        "/broken": broken,
    }
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    return app


# (path, reason counted, target up afterwards)
CASES = [
    ("/ok", None, True),
    ("/500", "http_status", False),
    ("/404", "http_status", False),
    ("/html", "not_metrics", False),
    ("/json", "not_metrics", False),
    ("/json-as-text", "not_metrics", False),
    ("/empty", "empty", False),
    ("/garbage", "not_metrics", False),
    ("/gzip", None, True),
    ("/gzip-corrupt", "decode", False),
    ("/gzip-no-header", None, True),
    ("/deflate", None, True),
    ("/br", "decode", False),
    ("/gzip-bomb", "too_large", False),
    ("/oversize", "too_large", False),
    ("/oversize-chunked", "too_large", False),
    ("/slow-body", "timeout", False),
    ("/slow-headers", "timeout", False),
    ("/broken", "connection", False),
    ("/malformed", "malformed_lines", True),
    ("/duplicates", "duplicate_series", True),
    ("/nan", "non_finite", True),
]


def test_each_fault_is_counted_by_reason_and_marks_up_correctly() -> None:
    async def main() -> None:
        async with serve_app(fault_app()) as base:
            refused = f"http://127.0.0.1:{free_port()}/metrics"
            targets = [Target(p.strip("/"), base + p) for p, _, _ in CASES] + [Target("refused", refused)]
            exporter = Exporter(targets, Options(interval=0.5, timeout=0.8, max_bytes=2 * MiB))
            async with make_session(0.8) as session:
                for _ in range(2):
                    await exporter.scrape_all(session)
            for path, reason, up in CASES:
                st = exporter.state(path.strip("/"))
                assert st is not None and st.up is up, (path, st.last_detail)
                counted = {k: v for k, v in st.errors.items() if v}
                assert counted == ({reason: 2} if reason else {}), (path, counted, st.last_detail)
            refused_state = exporter.state("refused")
            assert refused_state.errors["connection_refused"] == 2 and not refused_state.up
            # partial faults keep the good parts of the exposition
            (ok,) = [
                p for p in exporter.state("malformed").series.latest().instances.values() if p.instance == "1"
            ]
            assert ok.requests_running == 9.0
            nan = {s.instance: s for s in exporter.state("nan").series.latest().instances.values()}
            assert nan["0"].kv_usage_ratio is None and nan["1"].requests_waiting is None
            assert nan["1"].kv_usage_ratio == 0.25
            gz = exporter.state("gzip").series.latest().instances
            assert {s.instance for s in gz.values()} == {"0", "1"}

    asyncio.run(main())


def test_loop_goes_on_while_targets_misbehave() -> None:
    async def main() -> None:
        async with serve_app(fault_app()) as base:
            targets = [
                Target(n, base + p)
                for n, p in (("good", "/ok"), ("slow", "/slow-headers"), ("err", "/500"), ("html", "/html"))
            ]
            exporter = Exporter(targets, Options(interval=0.25, timeout=0.2))
            stop = asyncio.Event()
            task = asyncio.create_task(exporter.run(stop))
            good, slow, err, html = exporter.states
            await asyncio.to_thread(
                wait_until,
                lambda: (
                    good.scrapes,
                    slow.errors.get("timeout", 0),
                    err.errors.get("http_status", 0),
                    html.errors.get("not_metrics", 0),
                ),
                "6 scrapes of the good target and 6 errors of each faulty one",
                ok=lambda counts: min(counts) >= 6,
            )
            stop.set()
            await asyncio.wait_for(task, 5)
            assert good.up and good.scrapes >= 6
            assert slow.errors["timeout"] >= 6 and err.errors["http_status"] >= 6
            assert html.errors["not_metrics"] >= 6
            assert not (slow.up or err.up or html.up)

    asyncio.run(main())


def test_dns_failure_is_counted() -> None:
    async def main() -> None:
        exporter = Exporter([Target("nx", "http://nonexistent.invalid:9/metrics")], Options(timeout=10))
        async with make_session(10) as session:
            await exporter.scrape_all(session)
        st = exporter.states[0]
        assert not st.up and st.errors["dns"] == 1, st.last_detail

    asyncio.run(main())


@pytest.mark.parametrize(
    "spec",
    [
        "ftp://host/metrics",
        "file:///etc/passwd",
        "unix:///run/x.sock",
        "localhost:9400",
        "gopher://x",
        "http://",
        "http://h:99999/",
    ],
)
def test_non_http_targets_are_rejected_clearly(spec: str) -> None:
    with pytest.raises(TargetError) as e:
        parse_target(spec)
    assert spec in str(e.value)
    if "://" in spec and not spec.startswith("http"):
        assert "only http and https" in str(e.value)


def test_target_names_and_default_path() -> None:
    assert parse_target("a=http://h:1") == Target("a", "http://h:1/metrics")
    with_userinfo = parse_target("https://u:pw@h:8443/prometheus/metrics")
    assert (with_userinfo.name, with_userinfo.url) == ("h:8443", "https://h:8443/prometheus/metrics")
    assert with_userinfo.credentials is not None and "pw" not in repr(with_userinfo)
    assert parse_target("http://h/metrics?x=a=b").name == "h"
    with pytest.raises(ValueError):
        Exporter([Target("a", "http://h/"), Target("a", "http://g/")])


def test_internal_error_is_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug while analysing a body is counted as `internal` and the target goes on being
    scraped (`ingest` analyses on this thread, where the patch applies)."""
    import exporter.analysis as analysis

    def explode(*a, **k):
        raise RuntimeError("bug")

    monkeypatch.setattr(analysis, "normalise", explode)
    exporter = Exporter([Target("ok", "http://127.0.0.1:9/metrics")])
    st = exporter.states[0]
    exporter.ingest(st, ScrapeResult(VLLM.encode(), None, "", 0.01), 1.0)
    assert not st.up and st.errors["internal"] == 1 and "bug" in st.last_detail
    monkeypatch.undo()
    exporter.ingest(st, ScrapeResult(VLLM.encode(), None, "", 0.01), 2.0)
    assert st.up
