"""GET /kv_event_sources on the bundled engine answers as vLLM 0.32's does (one publisher
config per data-parallel rank, ranks as string keys, vLLM's keys), so `--kv-events auto`
works on it: endpoints as configured, a port left to the OS as the one bound; `{}` without
events."""

from __future__ import annotations

import json

import pytest

from harness.run.procs import http_get
from tests.support.servers import engine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
VLLM_KEYS = {  # vllm.config.kv_events.KVEventsConfig's fields, as GET /kv_event_sources serves them
    "enable_kv_cache_events", "publisher", "endpoint", "replay_endpoint", "buffer_steps", "hwm",
    "max_queue_size", "topic",
}  # fmt: skip


def _sources(url: str) -> dict:
    status, body = http_get(url + "/kv_event_sources", 10.0)
    assert status == 200, body
    return json.loads(body)


def test_the_engine_states_its_publisher_as_vllm_does(tmp_path) -> None:
    pub = f"ipc://{tmp_path}/kv-events"
    config = {"enable_kv_cache_events": True, "endpoint": pub, "replay_endpoint": "tcp://127.0.0.1:0",
              "topic": "kv", "buffer_steps": 64}  # fmt: skip
    with engine(tmp_path, "--kv-events-config", json.dumps(config)) as url:
        stated = _sources(url)
    assert list(stated) == ["0"] and set(stated["0"]) == VLLM_KEYS
    rank0 = stated["0"]
    assert rank0["endpoint"] == pub and rank0["publisher"] == "zmq" and rank0["enable_kv_cache_events"]
    assert rank0["topic"] == "kv" and rank0["buffer_steps"] == 64 and rank0["hwm"] == 100_000
    host, _, port = rank0["replay_endpoint"].rpartition(":")
    assert host == "tcp://127.0.0.1" and int(port) > 0  # the port bound, not 0


def test_without_events_the_engine_states_none(tmp_path) -> None:
    with engine(tmp_path) as url:
        assert _sources(url) == {}
