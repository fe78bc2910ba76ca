"""`kvscope run --target URL --kv-events auto` on the bundled engine (tiny-random, CPU), which
states its publisher at GET /kv_event_sources as vLLM 0.32 does. The engine is set up as the
issue found vLLM: its endpoint has no '*', so its PUB connects to a subscriber that must bind.
With auto, kvscope reads that, binds the address itself (it is this machine's) and says so;
given the same address to connect to, as a user would, the run is never silent about it: a
warning 10 s after the first completed request, a note with its code in run.json and the
report, and the `kv events:` line. A server that cannot say where it publishes is said too."""

from __future__ import annotations

import json

import pytest

from harness.bundle.kv_events import KV_EVENTS
from harness.run.procs import free_port
from tests.support.servers import engine, kvscope_run, standin

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
LOAD = ("--workload", "shared_prefix", "--num-prefixes", "2", "--prefix-tokens", "64", "--suffix-tokens", "8",
        "--output-tokens", "8", "--users", "2", "--no-calibrate", "--no-advise")  # fmt: skip


@pytest.fixture(scope="module")
def connecting_engine(tmp_path_factory):
    """(URL, PUB address): a bundled engine whose KV event publisher connects."""
    tmp = tmp_path_factory.mktemp("engine")
    pub, replay = free_port(), free_port()
    config = {"enable_kv_cache_events": True, "endpoint": f"tcp://127.0.0.1:{pub}",
              "replay_endpoint": f"tcp://127.0.0.1:{replay}", "topic": "kv"}  # fmt: skip
    with engine(tmp, "--kv-events-config", json.dumps(config), "--num-blocks", "64") as url:
        yield url, f"tcp://127.0.0.1:{pub}"


def _run_json(out) -> dict:
    return json.loads((out / "run.json").read_text())


def test_auto_binds_what_a_connecting_publisher_needs_and_says_so(connecting_engine, tmp_path):
    url, pub = connecting_engine
    out = tmp_path / "b"
    rc, log, _ = kvscope_run(
        "--target", url, *LOAD, "--duration", "6s", "--kv-events", "auto", "--out", str(out)
    )
    assert rc == 0, log
    assert f"kvscope binds {pub} itself" in log and "[kv_events_connect_style_bound]" in log
    kv = _run_json(out)["kv_events"]
    assert [n["code"] for n in kv["notes"]] == ["kv_events_connect_style_bound"]
    (source,) = kv["sources"]
    assert source["bind"] and source["endpoint"] == pub and source["connected"] and source["topic"] == "kv"
    assert kv["batches"] > 0 and kv["stored_blocks"] > 0 and kv["gaps"] == 0 and kv["lost_batches"] == 0
    assert kv["stated"]["0"]["endpoint"] == pub
    line = next(x for x in log.splitlines() if x.startswith("kv events: "))
    assert line == (
        f"kv events: {kv['batches']} batches ({kv['replayed_batches']} replayed), {kv['stored_blocks']} "
        f"blocks stored, {kv['removed_blocks']} removed, 0 gaps, 0 batches lost"
    )
    assert (out / KV_EVENTS).exists()


def test_connecting_to_a_connecting_publisher_is_never_silent(connecting_engine, tmp_path):
    """The issue's case: both ends connect, nothing arrives. The run says so while it runs."""
    url, pub = connecting_engine
    out = tmp_path / "b"
    rc, log, _ = kvscope_run(
        "--target", url, *LOAD, "--duration", "14s", "--kv-events", pub, "--out", str(out)
    )
    assert rc == 0, log
    warning = next(x for x in log.splitlines() if x.startswith("kvscope run: warning: kv events:"))
    assert "no KV event batch within 10 s of the first completed request" in warning
    assert f"nothing accepted kvscope's connection to {pub}" in warning and "tcp://*:PORT" in warning
    assert warning.endswith("[kv_events_not_connected]")
    assert "kv events: no batch received (kv_events_not_connected)" in log
    run = _run_json(out)
    kv = run["kv_events"]
    assert [n["code"] for n in kv["notes"]] == ["kv_events_not_connected"] and kv["batches"] == 0
    assert not kv["sources"][0]["connected"]
    assert "kv_events_not_connected" in [n["code"] for n in run["notes"]]
    assert "nothing accepted kvscope's connection" in (out / "report.md").read_text()


def test_a_server_that_cannot_say_where_it_publishes(tmp_path):
    with standin(tmp_path, "ok") as url:  # no GET /kv_event_sources: an older vLLM, another engine
        rc, log, _ = kvscope_run(
            "--target", url, "--workload", "chat", "--users", "1", "--duration", "2s", "--no-calibrate",
            "--no-advise", "--kv-events", "auto", "--out", str(tmp_path / "b"),
        )  # fmt: skip
    assert rc == 0, log
    assert "kv events: " in log and "HTTP 404" in log and "[kv_events_sources_unavailable]" in log
    assert "kv events: none subscribed (kv_events_sources_unavailable; see the notes above)" in log
    kv = _run_json(tmp_path / "b")["kv_events"]
    assert kv["sources"] == [] and [n["code"] for n in kv["notes"]] == ["kv_events_sources_unavailable"]
