"""The block-level view through the exporter: `--kv-events` on the command line, the
kvscope_kv_* families on /metrics (checked by promtool), the projected hit ratios joined with
the target's prefix-cache counters, /api/v1/kv_events, the recording, and vLLM's residency
histograms normalised. The publisher is kv_publisher.py (vLLM's protocol; see its doc)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from exporter.__main__ import main
from exporter.app import make_app
from exporter.kv_events.hub import KvEventsHub
from exporter.kv_events.lookup import scrape_lookup
from exporter.kv_events.service import attach
from exporter.kv_events.spec import KvEventsSource, KvEventsSpecError, parse_source, parse_sources
from exporter.runner import Exporter, Options
from exporter.scrape import Target
from tests.exporter.kv_publisher import Publisher, batch, removed, stored
from tests.exporter.test_exporter_app import check_promtool, families, get
from tests.support.prometheus import serve_app
from tests.support.synthetic_metrics import EngineState, vllm_v1_exposition
from tests.support.wait import wait_until

RESIDENCY = """# HELP vllm:kv_block_lifetime_seconds Histogram of KV cache block lifetime.
# TYPE vllm:kv_block_lifetime_seconds histogram
vllm:kv_block_lifetime_seconds_bucket{engine="0",le="1.0",model_name="tiny"} 3.0
vllm:kv_block_lifetime_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 5.0
vllm:kv_block_lifetime_seconds_count{engine="0",model_name="tiny"} 5.0
vllm:kv_block_lifetime_seconds_sum{engine="0",model_name="tiny"} 9.5
"""


def target_app() -> web.Application:
    state = EngineState(running=2, waiting=0, kv_usage=0.4)

    async def metrics(request: web.Request) -> web.Response:
        state.prefix_queries += 1000
        state.prefix_hits += 250
        text = vllm_v1_exposition([state], model="tiny", num_gpu_blocks=40)
        return web.Response(text=text + RESIDENCY, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


def scenario() -> list[bytes]:
    """A 4-block system prompt continued by 5 requests; then pressure evicts 3 of them and
    the prompt's tail, and two requests come back (4 capacity misses)."""
    out = [batch([stored([1, 2, 3, 4])])]
    out += [batch([stored([100 + i], parent=4)]) for i in range(5)]
    out.append(batch([removed([104]), removed([103]), removed([102]), removed([4])]))
    out.append(batch([stored([4], parent=3), stored([102], parent=4)]))
    out.append(batch([stored([103], parent=4)]))
    return out


def test_kv_events_metrics_api_and_recording(tmp_path: Path) -> None:
    pub = Publisher(topic="kv")

    async def main_() -> tuple[str, dict]:
        async with serve_app(target_app()) as url:
            exporter = Exporter([Target("vllm", url + "/metrics")], Options(interval=0.2, window=5))
            hub = KvEventsHub(
                [KvEventsSource("vllm", pub.endpoint, pub.replay_endpoint, "kv")],
                window_s=5,
                lookup=scrape_lookup(exporter),
            )
            app = make_app(exporter)
            attach(app, hub, 0.2, tmp_path / "rec")
            async with serve_app(app) as base, aiohttp.ClientSession() as s:
                state = hub.states[0]
                await asyncio.to_thread(wait_until, lambda: state.connected, "the subscriber connected")

                def joined() -> int:  # PUB/SUB slow joiner: empty batches until one lands
                    pub.send(batch([]))
                    return state.stream.applied

                await asyncio.to_thread(wait_until, joined, "a first batch applied", interval_s=0.02)
                for payload in scenario():
                    pub.send(payload)
                await asyncio.to_thread(
                    wait_until, lambda: state.stream.expected == pub.seq, "the scenario's batches applied"
                )
                # The projections need the hub's ticks and the target's scrapes after the events.
                ticks, scrapes = hub.ticks, exporter.states[0].scrapes
                await asyncio.to_thread(
                    wait_until,
                    lambda: (hub.ticks - ticks, exporter.states[0].scrapes - scrapes),
                    "3 hub ticks and 3 scrapes after the scenario",
                    ok=lambda done: min(done) >= 3,
                )
                status, text = await get(s, base + "/metrics")
                assert status == 200
                _, body = await get(s, base + "/api/v1/kv_events")
                return text, json.loads(body)

    try:
        text, api = asyncio.run(main_())
    finally:
        pub.close()
    m = families(text)
    tier = (("instance", "0"), ("medium", "GPU"), ("target", "vllm"))
    assert m[("kvscope_kv_cached_blocks", tier)] == 8  # 1-4 and 100-103
    assert m[("kvscope_kv_blocks_stored_total", tier)] == 12
    assert m[("kvscope_kv_blocks_removed_total", tier)] == 4
    assert m[("kvscope_kv_capacity_misses_total", tier)] == 3
    assert m[("kvscope_kv_first_stores_total", tier)] == 9
    assert m[("kvscope_kv_capacity_miss_distance_blocks_count", tier)] == 3
    first = (("instance", "0"), ("rank", "1"), ("target", "vllm"))
    # the prompt's tail was evicted with its 5 continuations, and came back with 2 of them
    assert m[("kvscope_kv_hot_prefix_reuse", first)] == 2
    assert m[("kvscope_kv_hot_prefix_depth_blocks", first)] == 4
    lab = lambda inc: (("instance", "0"), ("pool_increase", inc), ("target", "vllm"))  # noqa: E731
    assert m[("kvscope_kv_pool_extra_blocks", lab("0.25"))] == 10  # of the target's 40 blocks
    assert m[("kvscope_kv_avoidable_misses_total", lab("2"))] == 3
    assert 0.25 <= m[("kvscope_prefix_cache_hit_ratio_projected", lab("1"))] <= 1.0
    assert m[("kvscope_kv_events_connected", (("target", "vllm"),))] == 1
    assert m[("kvscope_kv_events_problems_total", (("reason", "gap"), ("target", "vllm")))] == 0
    assert m[("kvscope_kv_events_batches_total", (("target", "vllm"),))] >= len(scenario())
    residency = (("instance", "0"), ("model", "tiny"), ("target", "vllm"))
    assert m[("kvscope_kv_block_lifetime_seconds_count", residency)] == 5
    check_promtool(text, tmp_path)

    (source,) = api["sources"]
    assert source["name"] == "vllm" and source["connected"] and source["problems"] == {}
    (view,) = api["instances"]
    assert view["cached_blocks"] == 8 and view["pool_blocks"] == 40 and view["pool_from"] == "engine"
    assert view["hot_chains"][0]["reuse"] == 2 and len(view["curve"]) == 4

    rows = [
        json.loads(line) for line in (tmp_path / "rec" / "kv_events" / "vllm.jsonl").read_text().splitlines()
    ]
    assert rows and rows[-1]["capacity_misses"] == 3 and rows[-1]["stream"]["name"] == "vllm"
    assert {"t", "curve", "hot_chains", "distances", "cached_blocks"} <= set(rows[-1])


def test_the_flag_is_parsed_and_refused_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    s = parse_source("vllm=tcp://gpu-a:5557,replay=tcp://gpu-a:5558,topic=kv")
    assert s == KvEventsSource("vllm", "tcp://gpu-a:5557", "tcp://gpu-a:5558", "kv", False)
    assert parse_source("e=tcp://127.0.0.1:7000,bind").bind
    assert parse_source("e=tcp://[::1]:7000").endpoint == "tcp://[::1]:7000"
    for bad, message in (
        ("tcp://gpu:5557", "want NAME="),
        ("a=http://gpu:5557", "must be tcp://"),
        ("a=tcp://gpu:5557,replay=gpu:5558", "replay endpoint must be"),
        ("a=tcp://gpu:5557,speed=9", "unknown option"),
    ):
        with pytest.raises(KvEventsSpecError, match=message):
            parse_source(bad)
    with pytest.raises(KvEventsSpecError, match="unique"):
        parse_sources(["a=tcp://x:1", "a=tcp://y:2"])
    assert main(["--target", "http://127.0.0.1:9/metrics", "--kv-events", "nonsense"]) == 2
    assert "want NAME=" in capsys.readouterr().err


def test_the_exporter_process_subscribes(tmp_path: Path) -> None:
    """`python -m exporter --kv-events ...` as an operator runs it: a bound SUB the publisher
    connects to (the bundled engine's arrangement), then /api/v1/kv_events."""
    import subprocess
    import urllib.request

    import zmq

    from tests.support.prometheus import free_port, stop_process

    sub_port, port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "--target",
            "e=http://127.0.0.1:9/metrics",
            "--kv-events",
            f"e=tcp://127.0.0.1:{sub_port},bind",
            "--listen",
            f"127.0.0.1:{port}",
            "--interval",
            "200ms",
        ],
        stderr=subprocess.PIPE,
    )
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.connect(f"tcp://127.0.0.1:{sub_port}")
    try:
        deadline = time.monotonic() + 30
        seq = 0
        while time.monotonic() < deadline:
            pub.send_multipart([b"", seq.to_bytes(8, "big"), batch([stored([seq + 1])])])
            seq += 1
            time.sleep(0.1)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/kv_events", timeout=2) as r:
                    data = json.loads(r.read())
            except OSError:
                continue
            if data["instances"] and data["instances"][0]["cached_blocks"] > 0:
                break
        else:
            raise AssertionError(proc.stderr.read1().decode() if proc.poll() is not None else "no events")
        assert data["sources"][0]["bind"] and data["instances"][0]["target"] == "e"
    finally:
        pub.close(linger=0)
        ctx.term()
        stop_process(proc)
