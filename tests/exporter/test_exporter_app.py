"""End to end: vLLM V1 servers (fixtures, and a live synthetic engine) -> exporter app -> HTTP.

Covers /metrics (parsed back with prometheus_client, and checked by promtool), the JSON
API, `--record` files, live advice, and an engine restart: up=0 during the outage, counters
that start again from zero, and windowed rates that stay non-negative.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import make_app
from exporter.runner import Exporter, Options
from exporter.scrape import Target
from tests.support.prometheus import free_port, serve_app
from tests.support.synthetic_metrics import EngineState, vllm_v1_exposition
from tests.support.wait import wait_until

DATA = Path(__file__).parent / "data" / "metrics"
DP2 = (DATA / "synthetic_vllm_0.11_v1_dp2_cache_config.prom").read_text()
V010 = (DATA / "vllm_0.10.0_v1_created_series_deprecated_gpu_prefix_prodstack617.prom").read_text()
MODEL = "Qwen/Qwen2.5-7B-Instruct"


class Engine:
    """A vLLM V1 /metrics endpoint whose counters move on every scrape (one engine core)."""

    def __init__(self, usage: float = 0.99) -> None:
        self.state = EngineState(running=3, waiting=4, kv_usage=usage)

    def app(self) -> web.Application:
        async def metrics(request: web.Request) -> web.Response:
            s = self.state
            s.prefix_queries += 1000
            s.prefix_hits += 250
            s.preemptions += 1
            s.prompt_tokens += 1000
            s.generation_tokens += 100
            s.finished["stop"] += 2
            return web.Response(
                text=vllm_v1_exposition([s], model="tiny", cache_dtype="auto", gpu_memory_utilization=0.8),
                content_type="text/plain",
            )

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        return app


def static_app(text: str) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=text, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


def families(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url) as r:
        return r.status, await r.text()


async def wait_scraped(exporter: Exporter, n: int) -> None:
    """Until every target has been scraped `n` times. The scrapes run on this loop: the wait
    runs in a thread meanwhile."""
    await asyncio.to_thread(
        wait_until,
        lambda: min(st.scrapes for st in exporter.states),
        f"{n} scrapes of every target",
        ok=lambda scrapes: scrapes >= n,
    )


def test_vllm_fixtures_end_to_end(tmp_path: Path) -> None:
    async def main() -> str:
        async with serve_app(static_app(DP2)) as dp2, serve_app(static_app(V010)) as v010:
            exporter = Exporter(
                [Target("dp2", dp2 + "/metrics"), Target("glm", v010 + "/metrics")],
                Options(interval=0.2, record_dir=tmp_path / "rec"),
            )
            async with serve_app(make_app(exporter)) as base, aiohttp.ClientSession() as s:
                await wait_scraped(exporter, 3)
                status, text = await get(s, base + "/metrics")
                assert status == 200
                m = families(text)
                lab = (("instance", "0"), ("model", MODEL), ("target", "dp2"))
                assert m[("kvscope_target_up", (("target", "dp2"),))] == 1.0
                assert m[("kvscope_kv_usage_ratio", lab)] == 0.75
                assert m[("kvscope_kv_capacity_blocks", lab)] == 20000
                assert m[("kvscope_kv_block_size_tokens", lab)] == 16
                assert m[("kvscope_kv_capacity_tokens", lab)] == 320000
                assert m[("kvscope_requests_running", lab)] == 12
                assert m[("kvscope_requests_waiting", lab)] == 3
                assert m[("kvscope_prefix_cache_queries_tokens_total", lab)] == 10000
                assert m[("kvscope_prefix_cache_hits_tokens_total", lab)] == 4000
                assert m[("kvscope_preemptions_total", lab)] == 7
                assert m[("kvscope_requests_finished_total", lab)] == 50
                assert m[("kvscope_prompt_tokens_total", lab)] == 10000
                assert m[("kvscope_generation_tokens_total", lab)] == 2500
                assert (
                    m[("kvscope_time_to_first_token_seconds_bucket", (*lab[:1], ("le", "0.5"), *lab[1:]))]
                    == 40
                )
                assert m[("kvscope_time_to_first_token_seconds_count", lab)] == 50
                assert m[("kvscope_time_to_first_token_seconds_sum", lab)] == 14.5
                assert m[("kvscope_preemptions_per_second", lab)] == 0.0  # static counters
                assert ("kvscope_prefix_cache_hit_ratio", lab) not in m  # nothing queried in the window
                advice = {k[1][0][1]: v for k, v in m.items() if k[0] == "kvscope_advice" and k[1][1:] == lab}
                assert set(advice) == {
                    "quantize_kv_cache",
                    "cut_context",
                    "add_memory",
                    "raise_memory_utilization",
                    "make_prefix_identical",
                    "kv_not_bottleneck",
                }
                glm = (("instance", "0"), ("model", "zai-org/GLM-4.5"), ("target", "glm"))
                assert m[("kvscope_prefix_cache_queries_tokens_total", glm)] == 32
                assert ("kvscope_kv_capacity_blocks", glm) not in m  # unknown is absent, never 0
                assert ("kvscope_requests_running", glm) not in m
                status, body = await get(s, base + "/api/v1/targets")
                targets = {t["name"]: t for t in json.loads(body)["targets"]}
                assert targets["dp2"]["dialect"] == "vllm" and targets["dp2"]["up"]
                assert targets["glm"]["variant"] == "v1" and any(
                    "mix names" in n for n in targets["glm"]["notes"]
                )
                status, body = await get(s, base + "/api/v1/samples?target=dp2&since=0")
                samples = json.loads(body)["targets"][0]["samples"]
                assert len(samples) >= 3 and samples[-1]["instances"][1]["kv_usage_ratio"] == 0.25
                t_mid = samples[-2]["t"]
                status, body = await get(s, base + f"/api/v1/samples?target=dp2&since={t_mid}")
                assert [p["t"] for p in json.loads(body)["targets"][0]["samples"]] == [samples[-1]["t"]]
                assert (await get(s, base + "/api/v1/samples?target=nope"))[0] == 404
                assert (await get(s, base + "/api/v1/samples?since=yesterday"))[0] == 400
                status, body = await get(s, base + "/healthz")
                assert json.loads(body) == {"status": "ok", "targets": 2, "up": 2}
            return text

    text = asyncio.run(main())
    rows = [json.loads(line) for line in (tmp_path / "rec" / "dp2.jsonl").read_text().splitlines()]
    assert len(rows) >= 6 and {r["instance"] for r in rows} == {"0", "1"}
    assert rows[0]["kv_capacity_tokens"] == 320000 and rows[0]["dialect"] == "vllm"
    assert (tmp_path / "rec" / "glm.jsonl").exists()
    check_promtool(text, tmp_path)


def check_promtool(text: str, tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/setup.sh installs Debian's prometheus package"
    proc = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    assert proc.stdout.decode().strip() == "" and proc.stderr.decode().strip() == "", proc.stderr.decode()


def test_live_engine_restart_and_advice(tmp_path: Path) -> None:
    async def main() -> None:
        port = free_port()
        engine = Engine(usage=0.99)
        exporter = Exporter(
            [Target("eng", f"http://127.0.0.1:{port}/metrics")],
            Options(interval=0.2, timeout=0.5, window=30, record_dir=tmp_path),
        )
        lab = (("instance", "0"), ("model", "tiny"), ("target", "eng"))
        async with serve_app(make_app(exporter)) as base, aiohttp.ClientSession() as s:
            async with serve_app(engine.app(), port):
                await wait_scraped(exporter, 5)
                m = families((await get(s, base + "/metrics"))[1])
                assert m[("kvscope_target_up", (("target", "eng"),))] == 1
                assert m[("kvscope_prefix_cache_hit_ratio", lab)] == pytest.approx(0.25)
                assert m[("kvscope_preemptions_per_second", lab)] > 0
                assert m[("kvscope_advice", (("action", "add_memory"), *lab))] == 1  # saturated + preempting
                assert m[("kvscope_advice", (("action", "raise_memory_utilization"), *lab))] == 1
                assert m[("kvscope_advice", (("action", "kv_not_bottleneck"), *lab))] == 0
                before = m[("kvscope_preemptions_total", lab)]
            # outage: connection refused, target down, canonical series withdrawn
            down_from = exporter.states[0].scrapes
            await wait_scraped(exporter, down_from + 3)
            m = families((await get(s, base + "/metrics"))[1])
            assert m[("kvscope_target_up", (("target", "eng"),))] == 0
            assert (
                m[("kvscope_scrape_errors_total", (("reason", "connection_refused"), ("target", "eng")))] >= 3
            )
            assert ("kvscope_kv_usage_ratio", lab) not in m
            # restart with fresh counters
            engine.state = EngineState(running=3, waiting=4, kv_usage=0.99)
            async with serve_app(engine.app(), port):
                up_from = exporter.states[0].scrapes
                await wait_scraped(exporter, up_from + 3)
                m = families((await get(s, base + "/metrics"))[1])
                assert m[("kvscope_target_up", (("target", "eng"),))] == 1
                assert m[("kvscope_preemptions_total", lab)] < before  # the engine's counter restarted
                assert m[("kvscope_preemptions_per_second", lab)] >= 0
                assert 0 <= m[("kvscope_prefix_cache_hit_ratio", lab)] <= 1
                window = exporter.states[0].series.window(("tiny", "0"), 30)
                values = [sample.preemptions for _, sample in window]
                assert any(b < a for a, b in zip(values, values[1:]))  # the restart's drop is in the window
        rows = [json.loads(x) for x in (tmp_path / "eng.jsonl").read_text().splitlines()]
        runs = [r["up"] for i, r in enumerate(rows) if i == 0 or r["up"] != rows[i - 1]["up"]]
        assert runs[-3:] == [True, False, True]  # serving, outage, serving again
        assert {r["reason"] for r in rows if not r["up"]} == {"connection_refused"}
        assert all(
            r["preemptions_per_second"] is None or r["preemptions_per_second"] >= 0 for r in rows if r["up"]
        )

    asyncio.run(main())


@pytest.mark.parametrize("path", sorted(DATA.glob("*.prom")), ids=lambda p: p.name)
def test_promtool_accepts_metrics_for_every_fixture(path: Path, tmp_path: Path) -> None:
    import time

    from prometheus_client import generate_latest

    from exporter.collector import make_registry
    from exporter.scrape import ScrapeResult

    exporter = Exporter([Target("t", "http://127.0.0.1:1/metrics")])
    text = path.read_text()
    for i in range(3):
        exporter.ingest(exporter.states[0], ScrapeResult(text, None, "", 0.01), time.time() + i)
    check_promtool(generate_latest(make_registry(exporter)).decode(), tmp_path)


def test_metrics_rendering_is_reused_until_the_next_ingest() -> None:
    import time

    from exporter.scrape import ScrapeResult

    state = EngineState(running=3, waiting=4, kv_usage=0.5)
    exporter = Exporter([Target("t", "http://127.0.0.1:1/metrics")])
    lab = (("instance", "0"), ("model", "tiny"), ("target", "t"))

    def ingest() -> None:
        text = vllm_v1_exposition([state], model="tiny", cache_dtype="auto", gpu_memory_utilization=0.8)
        exporter.ingest(exporter.states[0], ScrapeResult(text, None, "", 0.01), time.time())

    async def main() -> None:
        async with serve_app(make_app(exporter, run_loop=False)) as base, aiohttp.ClientSession() as s:
            ingest()
            first = (await get(s, base + "/metrics"))[1]
            assert families(first)[("kvscope_kv_usage_ratio", lab)] == 0.5
            state.kv_usage = 0.9  # the engine moved, but the exporter has not scraped it yet
            assert (await get(s, base + "/metrics"))[1] == first
            ingest()
            assert families((await get(s, base + "/metrics"))[1])[("kvscope_kv_usage_ratio", lab)] == 0.9
            async with s.get(
                base + "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
            ) as r:
                assert r.headers["Content-Type"].startswith("application/openmetrics-text")
                assert (await r.text()).rstrip().endswith("# EOF")
            plain = (await get(s, base + "/metrics"))[1]  # the OpenMetrics body was not served as text
            assert not plain.rstrip().endswith("# EOF")

    asyncio.run(main())
