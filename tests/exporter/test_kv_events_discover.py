"""`--kv-events auto`: what a server's `GET /kv_event_sources` becomes (subscriptions, or notes
with a code that say what to change), against vLLM 0.32's rule for its PUB socket (bound
with `*`, `::`, ipc or inproc; connected otherwise) and its answer's shape (ranks as string
keys). The addresses are never contacted here except where a test serves them."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from exporter.kv_events.discover import Note, fetch_stated, resolve, sources_url
from exporter.kv_events.spec import KvEventsSource, KvEventsSpecError, format_source, parse_source
from exporter.kv_events.subscriptions import subscriptions
from tests.support.prometheus import free_port, serve_app

# vLLM 0.32's answer, as a real server gave it (tests/integration/test_vllm_run.py checks the shape)
VLLM = {
    "enable_kv_cache_events": True,
    "publisher": "zmq",
    "endpoint": "tcp://*:5557",
    "replay_endpoint": "tcp://*:5558",
    "buffer_steps": 10000,
    "hwm": 100000,
    "max_queue_size": 100000,
    "topic": "kv",
}
LOCAL = {"127.0.0.1", "localhost", "loadgen"}  # this machine, for the tests


def _resolve(target: str, **config: object):
    return resolve("t", target, {"0": {**VLLM, **config}}, is_local=lambda host: host in LOCAL)


def _codes(found) -> list[str]:
    return [n.code for n in found.notes]


def test_a_wildcard_endpoint_is_reached_at_the_targets_host() -> None:
    found = _resolve("http://gpu-a:8000")
    assert found.sources == [KvEventsSource("t", "tcp://gpu-a:5557", "tcp://gpu-a:5558", "kv")]
    assert found.notes == []
    (source,) = _resolve("http://gpu-a:8000", endpoint="tcp://[::]:6000").sources
    assert source.endpoint == "tcp://gpu-a:6000" and not source.bind


def test_a_named_bound_endpoint_is_reached_where_it_says() -> None:
    (source,) = _resolve("http://gpu-a:8000", endpoint="tcp://[::1]:6000", replay_endpoint="ipc:///r").sources
    assert (source.endpoint, source.replay, source.bind) == ("tcp://[::1]:6000", "ipc:///r", False)


def test_a_connect_style_endpoint_on_this_machine_is_bound_here_and_said() -> None:
    found = _resolve("http://127.0.0.1:8000", endpoint="tcp://127.0.0.1:5557")
    (source,) = found.sources
    assert (
        source.bind and source.endpoint == "tcp://127.0.0.1:5557" and source.replay == "tcp://127.0.0.1:5558"
    )
    assert _codes(found) == ["kv_events_connect_style_bound"]
    assert "kvscope binds tcp://127.0.0.1:5557 itself" in found.notes[0].text
    # 0.0.0.0 has no '*': vLLM connects to its own machine, which is this one
    (here,) = _resolve("http://localhost:8000", endpoint="tcp://0.0.0.0:5557").sources
    assert here.bind and here.endpoint == "tcp://127.0.0.1:5557"
    # a remote server connecting to this machine by name: bound here too
    remote = _resolve("http://gpu-a:8000", endpoint="tcp://loadgen:5557")
    assert remote.sources[0].bind and _codes(remote) == ["kv_events_connect_style_bound"]


def test_a_connect_style_endpoint_kvscope_cannot_bind_says_what_to_change() -> None:
    # a remote server connecting to its own loopback, and one connecting to a third machine
    for target, endpoint, where in (
        ("http://gpu-a:8000", "tcp://127.0.0.1:5557", "the server's own loopback"),
        ("http://gpu-a:8000", "tcp://0.0.0.0:5557", "the server's own loopback"),
        ("http://gpu-a:8000", "tcp://collector:5557", "collector, not this machine"),
    ):
        found = _resolve(target, endpoint=endpoint)
        assert found.sources == [] and _codes(found) == ["kv_events_connect_style"]
        text = found.notes[0].text
        assert where in text and 'set "endpoint" to tcp://*:5557 in the server\'s --kv-events-config' in text


def test_replay_problems_are_said_and_the_live_stream_kept() -> None:
    found = _resolve("http://gpu-a:8000", replay_endpoint=None)
    assert found.sources[0].replay is None and _codes(found) == ["kv_events_no_replay"]
    found = _resolve("http://gpu-a:8000", replay_endpoint="tcp://127.0.0.1:5558")
    assert found.sources[0].replay is None and _codes(found) == ["kv_events_replay_unreachable"]


def test_a_server_without_events_and_other_answers() -> None:
    none = resolve("t", "http://gpu-a:8000", {})
    assert none.sources == [] and _codes(none) == ["kv_events_not_enabled"]
    assert "--kv-events-config" in none.notes[0].text
    off = _resolve("http://gpu-a:8000", enable_kv_cache_events=False, publisher="null")
    assert off.sources == [] and _codes(off) == ["kv_events_not_published"]
    inproc = _resolve("http://gpu-a:8000", endpoint="inproc://kv")
    assert inproc.sources == [] and _codes(inproc) == ["kv_events_endpoint_unreachable"]
    bad = resolve("t", "http://gpu-a:8000", {"0": "tcp://*:5557"})
    assert bad.sources == [] and _codes(bad) == ["kv_events_sources_malformed"]


def test_each_data_parallel_rank_is_a_source_of_its_own() -> None:
    stated = {str(r): {**VLLM, "endpoint": f"tcp://*:{5557 + r}"} for r in (0, 1, 10)}
    found = resolve("t", "http://gpu-a:8000", stated, is_local=lambda h: False)
    assert [(s.name, s.endpoint) for s in found.sources] == [
        ("t", "tcp://gpu-a:5557"),
        ("t-1", "tcp://gpu-a:5558"),
        ("t-10", "tcp://gpu-a:5567"),
    ]


def test_the_sources_url_sits_beside_the_metrics() -> None:
    assert sources_url("http://h:8000/metrics") == "http://h:8000/kv_event_sources"
    assert sources_url("http://h:8000") == "http://h:8000/kv_event_sources"
    assert sources_url("https://gw/vllm/metrics?x=1") == "https://gw/vllm/kv_event_sources"


def test_every_subscription_round_trips_as_a_flag_value() -> None:
    for source in (
        KvEventsSource("t", "tcp://gpu-a:5557", "tcp://gpu-a:5558", "kv"),
        KvEventsSource("127.0.0.1:8000", "tcp://127.0.0.1:5557", None, "", bind=True),
    ):
        assert parse_source(format_source(source)) == source


def _server(answer, status: int = 200) -> web.Application:
    async def sources(request: web.Request) -> web.Response:
        assert request.headers.get("Authorization") in (None, "Bearer s3cret")
        return web.json_response(answer, status=status)

    app = web.Application()
    app.router.add_get("/kv_event_sources", sources)
    return app


def _fetch(app: web.Application, **kwargs):
    async def go():
        async with serve_app(app) as url:
            return await asyncio.to_thread(fetch_stated, url + "/metrics", **kwargs)

    return asyncio.run(go())


def test_fetching_what_the_server_states() -> None:
    assert _fetch(_server({"0": VLLM}), authorization="Bearer s3cret") == {"0": VLLM}
    missing = _fetch(_server({"detail": "Not Found"}, status=404))
    assert isinstance(missing, Note) and missing.code == "kv_events_sources_unavailable"
    assert "HTTP 404" in missing.text and "--kv-events tcp://HOST:PORT" in missing.text
    wrong = _fetch(_server(["not", "an", "object"]))
    assert isinstance(wrong, Note) and wrong.code == "kv_events_sources_malformed"
    gone = fetch_stated(f"http://127.0.0.1:{free_port()}/metrics", timeout_s=2.0)
    assert isinstance(gone, Note) and gone.code == "kv_events_sources_unreachable"


def test_auto_needs_a_target_it_can_name() -> None:
    with pytest.raises(KvEventsSpecError, match="name the target"):
        subscriptions(["auto"], {"a": "http://a/metrics", "b": "http://b/metrics"})
    with pytest.raises(KvEventsSpecError, match="no --target is named 'c'"):
        subscriptions(["c=auto"], {"a": "http://a/metrics"})
    given, notes = subscriptions(["a=tcp://a:5557"], {"a": "http://a/metrics"})
    assert given == [KvEventsSource("a", "tcp://a:5557")] and notes == []


def test_auto_on_a_target_that_cannot_say_is_a_note_not_an_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/metrics"
    sources, notes = subscriptions(["auto"], {"e": url})
    assert sources == [] and [n.code for n in notes] == ["kv_events_sources_unreachable"]
    assert notes[0].text.startswith("e: could not ask the server where it publishes")
    assert json.dumps([n.to_dict() for n in notes])  # what /api/v1/kv_events serves


def test_the_exporter_process_binds_what_a_connecting_publisher_states(tmp_path) -> None:
    """`python -m exporter --kv-events auto` against a server stating a connect-style endpoint
    (its PUB connects, as vLLM's does without '*'): the exporter says so, binds it, and the
    events flow; /api/v1/kv_events keeps the note."""
    import subprocess
    import sys

    from tests.exporter.kv_publisher import feed_until_cached
    from tests.support.prometheus import stop_process

    sub_port, port = free_port(), free_port()
    stated = {"0": {**VLLM, "endpoint": f"tcp://127.0.0.1:{sub_port}", "replay_endpoint": None}}
    app = _server(stated)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="")

    app.router.add_get("/metrics", metrics)
    log = tmp_path / "exporter.log"

    def run_exporter(url: str) -> dict:
        argv = [sys.executable, "-m", "exporter", "--target", f"e={url}/metrics", "--kv-events", "auto",
                "--listen", f"127.0.0.1:{port}", "--interval", "200ms"]  # fmt: skip
        with open(log, "wb") as f:
            proc = subprocess.Popen(argv, stderr=f)
        try:
            return feed_until_cached(sub_port, port, lambda: proc.poll() is None, topic=b"kv")
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {log.read_text()}") from None
        finally:
            stop_process(proc)

    async def go():
        async with serve_app(app) as url:
            return await asyncio.to_thread(run_exporter, url)

    data = asyncio.run(go())
    (source,) = data["sources"]
    assert source["bind"] and source["endpoint"] == f"tcp://127.0.0.1:{sub_port}" and source["topic"] == "kv"
    assert [n["code"] for n in data["notes"]] == ["kv_events_no_replay", "kv_events_connect_style_bound"]
    said = log.read_text()
    assert (
        f"kvscope exporter: kv events: e: the server connects its KV event publisher to tcp://127.0.0.1:{sub_port}"
        in said
    )
    assert "[kv_events_connect_style_bound]" in said and "[kv_events_no_replay]" in said
