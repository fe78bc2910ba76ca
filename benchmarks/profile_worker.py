"""Where kvscope's client CPU goes at N streams: each process's share (the `kvscope run`
orchestrator, the Locust master, the Locust worker; the sidecar apart), per streamed chunk,
and optionally a py-spy profile of the worker over the same steady window.

    python -m benchmarks.profile_worker [--streams 256] [--rounds 3] [--py-spy worker.speedscope.json]

The server and the request are `benchmarks/peer_clients.py`'s (the simulated 70B on 8 x
H100, 128-word completions, 128 tokens out, one token per chunk). py-spy samples with
`--nonblocking` (the worker is not paused), at 250 Hz, in speedscope format (open it at
speedscope.app, or read it with `--top`). py-spy is a diagnosis tool: install it with
`pip install py-spy`; it is not a kvscope dependency.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine_info import machine  # noqa: E402
from benchmarks.peer_clients import MODEL, SIM_FLAGS, WARM_S, WINDOW_S, counters, wait_for_load  # noqa: E402
from benchmarks.peers.clients import CLIENTS  # noqa: E402
from harness.run.commands import engine_command  # noqa: E402
from harness.run.procs import free_port, wait_http  # noqa: E402

ROLES = (
    ("exporter", "harness.cli exporter"),
    ("worker", "--worker"),
    ("master", "--master"),
    ("orchestrator", ""),
)


def role(proc: psutil.Process) -> str:
    line = " ".join(proc.cmdline())
    return next(name for name, mark in ROLES if mark in line)


def cpu_by_role(root: int) -> dict[str, float]:
    out: Counter[str] = Counter()
    try:
        procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.Error:
        return {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[role(p)] += t.user + t.system
        except psutil.Error:
            continue
    return dict(out)


def top_frames(path: Path, n: int) -> list[tuple[str, float]]:
    """The speedscope profile's functions by self time (share of all samples)."""
    data = json.loads(path.read_text())
    frames = data["shared"]["frames"]
    counts: Counter[str] = Counter()
    total = 0
    for prof in data["profiles"]:
        for stack, weight in zip(prof["samples"], prof["weights"]):
            total += weight
            if stack:
                f = frames[stack[-1]]
                counts[f"{f['name']} ({Path(f.get('file', '?')).name}:{f.get('line', 0)})"] += weight
    return [(name, c / max(1, total)) for name, c in counts.most_common(n)]


def one_round(url: str, streams: int, work: Path, py_spy: Path | None) -> tuple[dict[str, float], float]:
    """One kvscope run at `streams`: (CPU seconds per process role, chunks) over its window."""
    argv, env = CLIENTS["kvscope"].command(url, MODEL, streams, WARM_S + WINDOW_S + 5.0, work)
    start = counters(url)
    client = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        if not wait_for_load(url, start.generated, client):
            raise SystemExit("the client put no load on the server")
        time.sleep(WARM_S)
        spy = None
        if py_spy is not None:
            worker = next(
                p for p in psutil.Process(client.pid).children(recursive=True) if role(p) == "worker"
            )
            spy_argv = [
                "py-spy", "record", "--nonblocking", "--rate", "250", "--format", "speedscope",
                "--duration", f"{WINDOW_S:.0f}", "--pid", str(worker.pid), "--output", str(py_spy),
            ]  # fmt: skip
            spy = subprocess.Popen(spy_argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c1, g1 = cpu_by_role(client.pid), counters(url).generated
        time.sleep(WINDOW_S)
        c2, g2 = cpu_by_role(client.pid), counters(url).generated
        if spy is not None:
            spy.wait(60)
        client.wait(120)
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGTERM)
            client.wait(30)
    used = {name: c2.get(name, 0.0) - c1.get(name, 0.0) for name, _ in ROLES}
    return used, max(1.0, g2 - g1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3, help="runs against the same server; medians shown")
    ap.add_argument(
        "--py-spy", type=Path, help="record the worker of the last round into this speedscope file"
    )
    ap.add_argument("--top", type=int, default=25, help="with --py-spy: print the N hottest functions")
    args = ap.parse_args(argv)
    if args.py_spy and shutil.which("py-spy") is None:
        ap.error("--py-spy: py-spy is not installed (pip install py-spy)")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    started = machine().line()
    work = Path(tempfile.mkdtemp(prefix="kvscope-profile-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(work / "server.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(engine_command(None, list(SIM_FLAGS), port), cwd=ROOT, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    rounds = []
    try:
        ok, reason = wait_http(url + "/health", 180.0)
        if not ok:
            raise SystemExit(f"the simulated server did not start: {reason}")
        for i in range(args.rounds):
            print(f"[profile] round {i + 1}/{args.rounds}", file=sys.stderr)
            spy = args.py_spy if i == args.rounds - 1 else None
            rounds.append(one_round(url, args.streams, work / f"round{i}", spy))
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(30)
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    per_chunk = {name: [used[name] / chunks * 1e6 for used, chunks in rounds] for name, _ in ROLES}
    per_chunk["client"] = [
        sum(u for n, u in used.items() if n != "exporter") / chunks * 1e6 for used, chunks in rounds
    ]
    rate = float(np.median([chunks for _, chunks in rounds])) / WINDOW_S
    print(f"Command: `python -m benchmarks.profile_worker --streams {args.streams} --rounds {args.rounds}`. "
          f"Machine: {started}.")  # fmt: skip
    print()
    print(f"{args.streams} streams, {rate:,.0f} chunks/s in each {WINDOW_S:.0f} s window; CPU per chunk, "
          f"the median of {args.rounds} runs (lowest - highest):")  # fmt: skip
    print()
    print("| process | CPU us / chunk | range |")
    print("|---|---|---|")
    for name, label in [(n, n) for n, _ in ROLES] + [("client", "client (all but the exporter)")]:
        values = per_chunk[name]
        print(f"| {label} | {float(np.median(values)):.1f} | {min(values):.1f} - {max(values):.1f} |")
    if args.py_spy and args.py_spy.exists():
        print()
        print(f"Worker profile of the last round: {args.py_spy}; the hottest functions by self time:")
        print()
        for name, share in top_frames(args.py_spy, args.top):
            print(f"- {share:.1%} `{name}`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
