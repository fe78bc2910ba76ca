"""llama.cpp as a target of the exporter: the prefix counters' semantics (checked on real
captures, tests/fixtures/llamacpp), the /slots probe (KV occupancy and capacity, unified or
per-slot pool), and the same against a running llama-server (tests/support/llama_server):
the exporter's scrape loop with its probe, `inspect` on the live URL, and the notes when the
probe is off or the server refuses /slots."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import urllib.request
from pathlib import Path

import pytest

from exporter.dialects import normalise
from exporter.dialects.probe import ProbeInput, ProbeReply, ProbeSettings
from exporter.inspect_cmd import inspect
from exporter.parse import parse_exposition
from exporter.probe import probe_url
from exporter.runner import Exporter, Options
from exporter.scrape import make_session, parse_target
from tests.support.llama_server import llama_server
from tests.support.paths import ROOT

CAPTURES = ROOT / "tests" / "fixtures" / "llamacpp"


def probed(text: str, replies=None, settings: ProbeSettings | None = None, unprobed=None):
    return normalise(parse_exposition(text), probe=ProbeInput(replies, unprobed, settings or ProbeSettings()))


def sample(name: str, replies=None):
    (s,) = probed((CAPTURES / name).read_text(), replies).instances
    return s


def replies(slots: object, models: object | None = None) -> dict[str, ProbeReply]:
    out = {"/slots": ProbeReply("/slots", slots)}
    if models is not None:
        out["/v1/models"] = ProbeReply("/v1/models", models)
    return out


def test_prefix_counters_are_cached_over_cached_plus_computed() -> None:
    """The capture's README derives, request by request from `timings`: 88 cached and 100
    computed prompt tokens over requests 1-4, then 190 and 176 over the 6 concurrent ones."""
    before, mid, after = (sample(f"metrics_{n}.txt") for n in ("before", "after_sequential", "after_all"))
    assert mid.prefix_cache_hits_tokens - before.prefix_cache_hits_tokens == 88
    assert mid.prefix_cache_queries_tokens - before.prefix_cache_queries_tokens == 88 + 100
    assert after.prefix_cache_hits_tokens - mid.prefix_cache_hits_tokens == 190
    assert after.prefix_cache_queries_tokens - mid.prefix_cache_queries_tokens == 190 + 176
    assert after.prefix_cache_unit == "tokens" and after.prompt_tokens == 276  # computed only


def test_slots_give_occupancy_over_a_per_slot_pool() -> None:
    """-np 4 -c 4096: four 1,024-token slots; mid-decode they hold 144, 144, 144 and 101."""
    slots = json.loads((CAPTURES / "slots_during_concurrent_decoding.json").read_text())
    models = json.loads((CAPTURES / "v1_models.json").read_text())
    s = sample("metrics_during_concurrent.txt", replies(slots, models))
    assert s.kv_capacity_tokens == 4096
    assert s.kv_usage_ratio == pytest.approx((3 * 144 + 101) / 4096)
    assert (s.requests_running, s.requests_waiting) == (4, 2)
    idle = json.loads((CAPTURES / "slots_idle_after.json").read_text())
    assert sample("metrics_after_all.txt", replies(idle, models)).kv_usage_ratio == 0.0


def test_unified_pool_is_inferred_from_the_training_context_or_stated() -> None:
    """llama-server's defaults (-np auto) give a unified pool: every slot reports the whole
    pool, which then is the training context (seen: 4 slots x 8,192 with n_ctx_train 8,192)."""
    models = {"data": [{"id": "m", "meta": {"n_ctx_train": 8192}}]}
    slots = [{"id": i, "n_ctx": 8192, "is_processing": i < 2, "n_prompt_tokens": 1024} for i in range(4)]
    text = (CAPTURES / "metrics_during_concurrent.txt").read_text()
    norm = probed(text, replies(slots, models))
    (s,) = norm.instances
    assert s.kv_capacity_tokens == 8192 and s.kv_usage_ratio == pytest.approx(2048 / 8192)
    assert any("unified pool" in n for n in norm.notes)
    stated = probed(text, replies(slots, models), ProbeSettings("per-slot")).instances[0]
    assert stated.kv_capacity_tokens == 4 * 8192 and stated.kv_usage_ratio == pytest.approx(2048 / 32768)
    short = [dict(x, n_ctx=4096) for x in slots]  # -kvu -c 4096: not inferable, so stated
    assert (
        probed(text, replies(short, models), ProbeSettings("unified")).instances[0].kv_capacity_tokens == 4096
    )


def test_probe_failures_leave_kv_unknown_with_a_reason() -> None:
    text = (CAPTURES / "metrics_during_concurrent.txt").read_text()
    refused = {"/slots": ProbeReply("/slots", error="HTTP 501 Not Implemented")}
    norm = probed(text, refused)
    assert norm.instances[0].kv_usage_ratio is None and norm.instances[0].kv_capacity_tokens is None
    assert any("HTTP 501" in n and "--no-slots" in n for n in norm.notes)
    busy_without_count = [{"id": 0, "n_ctx": 1024, "is_processing": True}]
    s = probed(text, replies(busy_without_count)).instances[0]
    assert s.kv_capacity_tokens == 1024 and s.kv_usage_ratio is None
    off = probed(text, unprobed="--no-probe")
    assert any("not fetched (--no-probe)" in n for n in off.notes)


def test_probe_paths_resolve_beside_the_metrics_path() -> None:
    assert probe_url("http://h:8080/metrics", "/slots") == "http://h:8080/slots"
    assert probe_url("http://gw/llama/metrics?x=1", "/slots") == "http://gw/llama/slots"


def inspect_json(url: str, probe: bool = True) -> dict:
    out = io.StringIO()
    assert inspect(url, as_json=True, probe=probe, out=out) == 0
    return json.loads(out.getvalue())


def _chat(url: str, model: str, max_tokens: int) -> None:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Count slowly from one to one hundred."}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    req = urllib.request.Request(
        url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        resp.read()


async def _scrape_until_busy(exporter: Exporter, limit_s: float) -> list:
    """Scrape every 0.2 s until a sample shows KV in use (or `limit_s` passes)."""
    points = []
    async with make_session(2.0) as session:
        for _ in range(int(limit_s / 0.2)):
            points += await exporter.scrape_all(session)
            s = next(iter(points[-1].instances.values()), None) if points[-1].up else None
            if s is not None and s.kv_usage_ratio:
                break
            await asyncio.sleep(0.2)
    return points


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_live_llama_server_scrape_probe_and_inspect(tmp_path: Path) -> None:
    with llama_server(tmp_path) as server:
        exporter = Exporter([parse_target(server.url)], Options(timeout=2.0))
        threads = [threading.Thread(target=_chat, args=(server.url, server.model, 96)) for _ in range(3)]
        for t in threads:
            t.start()
        points = asyncio.run(_scrape_until_busy(exporter, 30.0))
        for t in threads:
            t.join()
        state = exporter.states[0]
        assert state.dialect == "llamacpp", state.notes
        assert (
            points[0].up and next(iter(points[0].instances.values())).kv_usage_ratio is None
        )  # first scrape
        busy = next(iter(points[-1].instances.values()))
        assert 0 < busy.kv_usage_ratio <= 1 and busy.kv_capacity_tokens == 4 * 2048, state.notes
        assert busy.requests_running >= 1
        doc = inspect_json(server.url + "/metrics")
        (inst,) = doc["instances"]
        assert doc["dialect"] == "llamacpp"
        assert inst["prefix_cache_queries_tokens"] >= inst["prefix_cache_hits_tokens"] >= 0
        assert inst["prefix_cache_queries_tokens"] > 0 and inst["kv_usage_ratio"] == 0.0  # idle now
        off = inspect_json(server.url + "/metrics", probe=False)
        assert off["instances"][0]["kv_usage_ratio"] is None
        assert any("--no-probe" in n for n in off["notes"])
    with llama_server(tmp_path, "--no-slots") as refusing:
        doc = inspect_json(refusing.url + "/metrics")
        assert doc["instances"][0]["kv_usage_ratio"] is None
        assert any("HTTP 501" in n for n in doc["notes"]), doc["notes"]
