"""The exporter against the real bundled engine under load: its canonical figures equal the
engine's own counters, and an engine restart shows as an outage with no negative rates."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from prometheus_client.parser import text_string_to_metric_families

from tests.support.preempting_engine import complete, engine_argv
from tests.support.prometheus import free_port
from tests.support.servers import ROOT, server
from tests.support.wait import wait_until


def load(base: str, n: int = 8) -> None:
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda i: complete(base, i), range(n)))
    assert all(r["usage"]["completion_tokens"] == 48 for r in results)


def engine_counters(base: str) -> dict[str, float]:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:  # noqa: S310
        text = r.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name in (
                "vllm:kv_cache_usage_perc",
                "vllm:prefix_cache_hits_total",
                "vllm:prefix_cache_queries_total",
                "vllm:num_preemptions_total",
                "vllm:num_requests_running",
            ):
                values[s.name] = s.value
    return values


def load_until_preempted(base: str, rounds: int = 5) -> None:
    """Rounds of 8 requests at once until the tiny pool has preempted: on a loaded machine one
    round's requests can reach the engine far enough apart that the pool holds them all (a
    fresh-clone suite read 0 preemptions after one round)."""
    for _ in range(rounds):
        load(base)
        if engine_counters(base)["vllm:num_preemptions_total"] > 0:
            return
    raise AssertionError(f"the tiny pool never preempted in {rounds} rounds of 8 requests")


def exporter_latest(eport: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{eport}/api/v1/samples?target=engine", timeout=10) as r:  # noqa: S310
        points = json.load(r)["targets"][0]["samples"]
    return points[-1]


def exporter_metric(eport: int, name: str) -> list[float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{eport}/metrics", timeout=10) as r:  # noqa: S310
        text = r.read().decode()
    return [s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


@contextmanager
def exporter(port: int, eport: int, log):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "--target",
            f"engine=http://127.0.0.1:{port}",
            "--listen",
            f"127.0.0.1:{eport}",
            "--interval",
            "0.5s",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(20)


def test_exporter_matches_engine_statistics_and_survives_a_restart(tmp_path):
    port, eport = free_port(), free_port()
    with open(tmp_path / "exporter.log", "wb") as log, exporter(port, eport, log):
        with server(engine_argv(port), port, "/health", 180.0, tmp_path / "engine1.log") as base:
            load_until_preempted(base)
            wait_until(
                lambda: engine_counters(base)["vllm:num_requests_running"] == 0, "engine idle", 30, 0.25
            )
            engine = engine_counters(base)
            started = time.time()
            point = wait_until(
                lambda: exporter_latest(eport), "a fresh scrape", 10, 0.25, ok=lambda p: p["t"] > started
            )
            (sample,) = point["instances"]
            assert engine["vllm:num_preemptions_total"] > 0, "the tiny pool preempted"
            assert sample["preemptions"] == engine["vllm:num_preemptions_total"]
            assert engine["vllm:prefix_cache_hits_total"] > 0, "the shared system prompt hit"
            assert sample["prefix_cache_hits_tokens"] == engine["vllm:prefix_cache_hits_total"]
            assert sample["prefix_cache_queries_tokens"] == engine["vllm:prefix_cache_queries_total"]
            assert sample["kv_usage_ratio"] == engine["vllm:kv_cache_usage_perc"] == 0.0
            assert sample["kv_capacity_blocks"] == 24 and sample["kv_block_size_tokens"] == 16
        # Engine down: the exporter keeps running and reports the outage.
        wait_until(
            lambda: exporter_metric(eport, "kvscope_target_up"),
            "up = 0 during the outage",
            15,
            0.25,
            ok=lambda up: up == [0.0],
        )
        with server(engine_argv(port), port, "/health", 180.0, tmp_path / "engine2.log") as base:
            wait_until(
                lambda: exporter_metric(eport, "kvscope_target_up"),
                "up = 1 after the restart",
                15,
                0.25,
                ok=lambda up: up == [1.0],
            )
            load(base, 4)
            loaded = time.time()

            def derived() -> tuple[float, list[float], list[float]]:
                return (
                    exporter_latest(eport)["t"],
                    exporter_metric(eport, "kvscope_preemptions_per_second"),
                    exporter_metric(eport, "kvscope_prefix_cache_hit_ratio"),
                )

            _, rates, ratios = wait_until(
                derived,
                "a scrape after the load, and the window's rates",
                10,
                0.25,
                ok=lambda d: d[0] > loaded,
            )
            assert rates and all(r >= 0 for r in rates), rates
            assert ratios and all(0 <= r <= 1 for r in ratios), ratios
