"""Exporter benchmark: parse+normalise speed, and the sidecar's footprint under load.

1. Parse + normalise a synthetic ~2,000-line multi-engine vLLM V1 exposition (written by
   prometheus_client, like vLLM's own), median over many runs, next to a plain
   `prometheus_client.parser.text_string_to_metric_families` parse of the same text.
   Target: median parse+normalise <= 10 ms.
2. Start the exporter as an operator would (`python -m exporter`, the sidecar entry point)
   against four local vLLM V1 targets whose counters move, scraping once a second; sample
   its RSS every second and its CPU time from /proc (Linux only) over two ~20 s windows:
   scraping only (target: <= 2 % of one core), then with its own /metrics also fetched once
   a second (a Prometheus scraping at 1 s; the usual 15 s costs a fifteenth of that).

Prints a markdown table. Usage: python benchmarks/exporter_bench.py [--seconds 20] [--runs 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aiohttp import web  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from exporter.dialects import normalise  # noqa: E402
from exporter.parse import parse_exposition  # noqa: E402
from tests.support.synthetic_metrics import demo_engines, vllm_v1_exposition  # noqa: E402


def timed(fn, runs: int) -> tuple[float, float, float]:
    """(median wall, p90 wall, median CPU) time of fn() in ms. CPU time (this process only)
    is reported too because wall time on a shared machine includes other processes' turns."""
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    wall.sort()
    return statistics.median(wall), wall[int(0.9 * (len(wall) - 1))], statistics.median(cpu)


def parse_bench(runs: int) -> list[tuple[str, ...]]:
    text = vllm_v1_exposition(demo_engines(8, step=30))
    lines = len(text.splitlines())
    n = normalise(parse_exposition(text))
    assert len(n.instances) == 8 and all(s.kv_capacity_tokens for s in n.instances)
    rows = [
        (f"kvscope parse ({lines} lines, 8 engines)", lambda: parse_exposition(text)),
        (
            "kvscope parse + normalise (detect, 8 instances + aggregate)",
            lambda: normalise(parse_exposition(text)),
        ),
        (
            "prometheus_client text_string_to_metric_families (parse only)",
            lambda: list(text_string_to_metric_families(text)),
        ),
    ]
    return [(name, *(f"{v:.2f}" for v in timed(fn, runs))) for name, fn in rows]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_targets(n: int) -> tuple[list[str], threading.Event]:
    """n vLLM V1 servers (2 engines each, counters moving per scrape) on a background loop."""
    urls: list[str] = []
    ready, stop = threading.Event(), threading.Event()

    async def main() -> None:
        runners = []
        for i in range(n):
            step = {"n": 0}

            async def metrics(request: web.Request, step=step, i=i) -> web.Response:
                step["n"] += 1
                return web.Response(
                    text=vllm_v1_exposition(demo_engines(2, step["n"]), model=f"model-{i}"),
                    content_type="text/plain",
                )

            app = web.Application()
            app.router.add_get("/metrics", metrics)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            port = free_port()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            runners.append(runner)
            urls.append(f"t{i}=http://127.0.0.1:{port}/metrics")
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.1)
        for r in runners:
            await r.cleanup()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    ready.wait(10)
    return urls, stop


def proc_stat(pid: int) -> tuple[float, int]:
    """(CPU seconds user+system, RSS bytes) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def _window(proc: subprocess.Popen, port: int, seconds: float, fetch: bool) -> tuple[float, list[int]]:
    """CPU share of one core over `seconds`, and RSS once a second; `fetch` adds a Prometheus
    scrape of the exporter's own /metrics every second."""
    cpu0, _ = proc_stat(proc.pid)
    t0 = time.monotonic()
    rss = []
    while time.monotonic() - t0 < seconds:
        time.sleep(1)
        rss.append(proc_stat(proc.pid)[1])
        if fetch:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    cpu1, _ = proc_stat(proc.pid)
    return (cpu1 - cpu0) / (time.monotonic() - t0), rss


def footprint(seconds: float) -> list[tuple[str, str]]:
    urls, stop = start_targets(4)
    port = free_port()
    args = [sys.executable, "-m", "exporter", "--listen", f"127.0.0.1:{port}", "--interval", "1s"]
    for u in urls:
        args += ["--target", u]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(3)  # start-up and first scrapes (imports are not part of the steady state)
        cpu_quiet, rss_quiet = _window(proc, port, seconds, fetch=False)
        cpu_fetched, rss_fetched = _window(proc, port, seconds, fetch=True)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5) as r:
            targets = json.loads(r.read())["targets"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            exported_lines = r.read().count(b"\n")
    finally:
        proc.terminate()
        proc.wait(10)
        stop.set()
    lines = len(vllm_v1_exposition(demo_engines(2, 1)).splitlines())
    rss = rss_quiet + rss_fetched
    return [
        ("targets x exposition size", f"4 x ~{lines} lines (vLLM V1, 2 engines each), 1 s interval"),
        ("measured for", f"two windows of {seconds:.0f} s after a 3 s warm-up"),
        (
            "scrapes per target / all up",
            f"{min(t['scrapes'] for t in targets)}-{max(t['scrapes'] for t in targets)}"
            f" / {all(t['up'] for t in targets)}",
        ),
        ("RSS (mean / max)", f"{statistics.mean(rss) / 2**20:.1f} MiB / {max(rss) / 2**20:.1f} MiB"),
        ("CPU, scraping only (% of one core; target <= 2 %)", f"{100 * cpu_quiet:.1f} %"),
        (
            f"CPU, plus its own /metrics ({exported_lines} lines) fetched once a second",
            f"{100 * cpu_fetched:.1f} %",
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--skip-footprint", action="store_true")
    args = ap.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"# exporter benchmark ({platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}, load average {load:.1f} at start)\n"
    )
    print(f"## parse + normalise, {args.runs} runs\n")
    print("| what | median wall ms | p90 wall ms | median CPU ms |\n|---|---:|---:|---:|")
    for row in parse_bench(args.runs):
        print(f"| {' | '.join(row)} |")
    if not args.skip_footprint and Path("/proc/self/stat").exists():
        print("\n## exporter process (`python -m exporter`) scraping four local targets\n")
        print("| measure | value |\n|---|---|")
        for k, v in footprint(args.seconds):
            print(f"| {k} | {v} |")


if __name__ == "__main__":
    main()
