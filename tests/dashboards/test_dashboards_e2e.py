"""Dashboards and alerts end to end: a real Prometheus, with the shipped scrape config,
scrapes the real exporter and the bundled engine while a tiny KV pool is under load. Every
panel query of both dashboards, with its variables filled in, returns data, and the
persistent-preemption alert fires (its windows shortened so it can fire within a test)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import yaml

from dashboards.generate import all_panel_queries, build_all
from harness.run import kv_events
from tests.support.preempting_engine import complete, engine_argv
from tests.support.prometheus import SHIPPED_PROM_DIR, free_port, query, shipped_prometheus, stop_process
from tests.support.servers import ROOT, server


def shortened_alerts(tmp_path: Path) -> Path:
    """The shipped rules with minutes turned into seconds, so alerts can fire in a test."""
    text = (SHIPPED_PROM_DIR / "alerts.yml").read_text()
    text = re.sub(r"\[(\d+)m\]", r"[\1s]", text)
    text = re.sub(r"for: (\d+)m", r"for: \1s", text)
    path = tmp_path / "alerts-short.yml"
    path.write_text(text)
    yaml.safe_load(path.read_text())
    return path


def fill_variables(base: str, model: dict, expr: str) -> str | None:
    """Set each template variable to a value Prometheus has, as a user picking it would
    (None while some variable has no value yet)."""
    values = {}
    for var in model["templating"]["list"]:
        if var["type"] != "query":
            continue
        metric, label = re.fullmatch(r"label_values\((.+), (\w+)\)", var["query"]).groups()
        selector = re.sub(r"[$]\w+", ".*", metric)
        found = query(base, f"count by ({label}) ({selector})")
        if not found:
            return None
        values[var["name"]] = found[0]["metric"][label]  # plain names: no regex metacharacters
    expr = expr.replace("$__rate_interval", "10s")
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), m.group(0)), expr)


def has_data(base: str, model: dict, expr: str) -> bool:
    filled = fill_variables(base, model, expr)
    return filled is not None and bool(query(base, filled))


def firing(base: str, name: str) -> bool:
    with urllib.request.urlopen(f"{base}/api/v1/alerts", timeout=10) as r:  # noqa: S310 - loopback
        alerts = json.load(r)["data"]["alerts"]
    return any(a["labels"]["alertname"] == name and a["state"] == "firing" for a in alerts)


def test_dashboards_and_alerts_on_real_prometheus_exporter_and_engine(tmp_path):
    """The engine publishes KV events and residency histograms (as `kvscope run --kv-events
    --kv-cache-metrics` starts it), so the block-level panels have data too."""
    port, eport = free_port(), free_port()
    stop = threading.Event()
    kv_flags, kv_specs = kv_events.bundled("engine")
    engine = [*engine_argv(port), *kv_flags, "--kv-cache-metrics", "--kv-cache-metrics-sample", "1"]

    def keep_loading(base: str) -> None:
        i = 0
        while not stop.is_set():
            threads = [threading.Thread(target=complete, args=(base, i + k)) for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            i += 8

    with (
        server(engine, port, "/health", 180.0, tmp_path / "engine.log") as engine_base,
        open(tmp_path / "exporter.log", "wb") as log,
    ):
        exporter = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "exporter",
                "--target",
                f"engine=http://127.0.0.1:{port}",
                "--listen",
                f"127.0.0.1:{eport}",
                "--interval",
                "1s",
                *(arg for spec in kv_specs for arg in ("--kv-events", spec)),
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        loader = threading.Thread(target=keep_loading, args=(engine_base,), daemon=True)
        loader.start()
        try:
            with shipped_prometheus(tmp_path, eport, port, [shortened_alerts(tmp_path)]) as base:
                dashboards = build_all()
                pending = {
                    (name, title, expr)
                    for name, model in dashboards.items()
                    for title, expr in all_panel_queries(model)
                }
                assert len(pending) > 20
                deadline = time.monotonic() + 120
                while pending and time.monotonic() < deadline:
                    time.sleep(2)
                    pending = {(n, t, e) for n, t, e in pending if not has_data(base, dashboards[n], e)}
                assert not pending, "no data: " + "\n".join(f"{n} / {t}: {e}" for n, t, e in sorted(pending))
                deadline = time.monotonic() + 90
                while not firing(base, "KvscopePersistentPreemption"):
                    assert time.monotonic() < deadline, "the persistent-preemption alert never fired"
                    time.sleep(2)
        finally:
            stop.set()
            loader.join(120)
            stop_process(exporter, 20)
