"""How much streaming load one Locust worker drives before its own timing goes wrong.

For each user count (closed loop, one request in flight per user) this runs `kvscope run`
against the bundled engine in simulation mode (a GPU cost model, no compute, so the server
is cheap and the client is what saturates) and measures, per request,
client overhead = client TTFT - server TTFT (the engine's own stamp for the same request).
A point "holds" when p99 overhead <= 5 ms. Reported: concurrent streams actually in flight
(sum of E2E / window), stream events (text chunks) per second, overhead p50/p99, and the
largest user count that holds, for one worker and for two.

Caveat (stated in the output): client and server share this machine's cores, and the
overhead includes the server's own event-loop delay in writing the chunk, so it bounds the
client's cost from above. So the overhead is split: the request path (server arrival -
client send, one machine's wall clock: the client's send plus the server's accept and
parse) and the response path (the rest: the server's write of the first chunk plus the
client's read). The Locust workers' CPU use and the 1-minute load average per point say
whether the client or the machine was the limit.

    .venv/bin/python benchmarks/harness_client_capacity.py                # start the simulator
    .venv/bin/python benchmarks/harness_client_capacity.py --target URL   # any kvscope-timed server
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.results import load  # noqa: E402
from harness.run.commands import engine_command, kvscope_command  # noqa: E402
from harness.run.procs import free_port, wait_http  # noqa: E402

LIMIT_S = 0.005
# 70B on 8 x H100 (tensor parallel), 4k context: ~1.4M KV tokens, so KV never limits the
# concurrency here and the server's step time stays in the ~10-20 ms range of a real one.
SIM_FLAGS = (
    "--simulate",
    "--sim-model",
    "llama-3.1-70b",
    "--sim-gpu",
    "h100-80gb",
    "--tensor-parallel-size",
    "8",
    "--max-model-len",
    "4096",
    "--max-num-seqs",
    "1024",
    "--max-num-batched-tokens",
    "65536",
)


def is_locust_worker(cmd: str) -> bool:
    return "locust" in cmd and "--worker" in cmd


def sample_worker_cpu(
    proc: subprocess.Popen, match: Callable[[str], bool] = is_locust_worker
) -> list[tuple[float, float]]:
    """(unix time, CPU seconds used so far by the run's children whose command line `match`es:
    by default its Locust workers), every 0.5 s until the run ends."""
    used: dict[int, float] = {}
    samples: list[tuple[float, float]] = []
    while proc.poll() is None:
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                cmd = " ".join(child.cmdline())
                if match(cmd):
                    t = child.cpu_times()
                    used[child.pid] = t.user + t.system
        except psutil.Error:
            pass
        samples.append((time.time(), sum(used.values())))
        time.sleep(0.5)
    return samples


def cpu_rate(samples: list[tuple[float, float]], start: float, end: float) -> float:
    """Cores used between `start` and `end` (the steady part of the run)."""
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2:
        return float("nan")
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def measure(
    target: str, users: int, workers: int, duration: str, out: Path, prompt: int, output: int
) -> dict:
    argv = kvscope_command(
        "run",
        "--quiet",
        "--target",
        target,
        "--workload",
        "long_context",
        "--users",
        str(users),
        "--spawn-rate",
        str(max(users // 2, 1)),
        "--duration",
        duration,
        "--workers",
        str(workers),
        "--prompt-tokens",
        str(prompt),
        "--output-tokens",
        str(output),
        "--no-calibrate",
        "--out",
        str(out),
    )
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    worker_cpu = sample_worker_cpu(proc)
    _, stderr = proc.communicate(timeout=600)
    if proc.returncode != 0:
        return {"users": users, "workers": workers, "error": stderr[-300:]}
    r = load(out)
    m = r.measured[r.measured["ok"]]
    # Skip the ramp: only requests sent after every user had started.
    m = m[m["send_time_unix"] >= m["send_time_unix"].min() + 2.0 + users / max(users // 2, 1)]
    window = (m["send_time_unix"] + m["e2e_s"]).max() - m["send_time_unix"].min()
    overhead = (m["ttft_s"] - m["server_ttft_s"]).dropna()
    # The request path (client send -> server handler, wall clocks of one machine); the rest
    # of the overhead is the response path (engine's first token -> client has the chunk).
    request_path = (m["server_arrival_unix"] - m["send_time_unix"]).dropna()
    return {
        "users": users,
        "workers": workers,
        "requests": len(m),
        "load": os.getloadavg()[0],
        "worker_cpu": cpu_rate(worker_cpu, m["send_time_unix"].min(), m["send_time_unix"].max()) / workers,
        "streams": float(m["e2e_s"].sum() / window),
        "events_per_s": float(m["num_chunks"].sum() / window),
        "req_per_s": len(m) / window,
        "p50_ms": float(overhead.quantile(0.5) * 1000),
        "p99_ms": float(overhead.quantile(0.99) * 1000),
        "max_ms": float(overhead.max() * 1000),
        "req_path_p99_ms": float(request_path.quantile(0.99) * 1000) if len(request_path) else float("nan"),
        "resp_path_p99_ms": float((overhead - request_path).dropna().quantile(0.99) * 1000)
        if len(request_path)
        else float("nan"),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| workers | users | streams in flight | events/s | req/s | overhead p50 | p99 | max | request path "
        "p99 | response path p99 | CPU per worker | load avg | holds (p99 <= 5 ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| {r['workers']} | {r['users']} | failed: "
                f"{r['error'].splitlines()[-1] if r['error'] else '?'} |||||||||||"
            )
            continue
        lines.append(
            f"| {r['workers']} | {r['users']} | {r['streams']:.0f} | {r['events_per_s']:,.0f} | "
            f"{r['req_per_s']:.1f} | {r['p50_ms']:.2f} ms | {r['p99_ms']:.2f} ms | {r['max_ms']:.1f} ms | "
            f"{r['req_path_p99_ms']:.2f} ms | {r['resp_path_p99_ms']:.2f} ms | {r['worker_cpu']:.0%} | "
            f"{r['load']:.1f} | {'yes' if r['p99_ms'] <= LIMIT_S * 1000 else 'no'} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", help="server to load (default: start the engine in simulation mode)")
    p.add_argument("--users", default="25,50,100,200,400", help="user counts to try (comma-separated)")
    p.add_argument("--workers", default="1,2", help="worker counts to try (comma-separated)")
    p.add_argument("--duration", default="20s")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=256)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kvscope-capacity-"))
    engine = None
    target = args.target
    if target is None:
        port = free_port()
        log = open(tmp / "engine.log", "wb")  # noqa: SIM115
        engine = subprocess.Popen(
            engine_command(None, list(SIM_FLAGS), port),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        ok, reason = wait_http(f"http://127.0.0.1:{port}/health", 120.0)
        if not ok:
            engine.kill()
            print(f"the simulator did not start ({reason}); see {tmp / 'engine.log'}", file=sys.stderr)
            return 1
        target = f"http://127.0.0.1:{port}"
    rows = []
    try:
        for workers in (int(w) for w in args.workers.split(",")):
            for users in (int(u) for u in args.users.split(",")):
                row = measure(
                    target,
                    users,
                    workers,
                    args.duration,
                    tmp / f"w{workers}-u{users}",
                    args.prompt_tokens,
                    args.output_tokens,
                )
                rows.append(row)
                print(table([row]).splitlines()[-1], file=sys.stderr, flush=True)
    finally:
        if engine is not None:
            engine.terminate()
            engine.wait(30)
    print(
        f"\nClient capacity, {args.prompt_tokens}-token prompts, {args.output_tokens} output tokens, "
        f"{args.duration} per point, closed loop; overhead = client TTFT - server TTFT (includes the "
        "server's own write delay; client and server share the machine).\n"
    )
    print(table(rows))
    for workers in sorted({r["workers"] for r in rows}):
        holding = [
            r for r in rows if r["workers"] == workers and "error" not in r and r["p99_ms"] <= LIMIT_S * 1000
        ]
        best = max(holding, key=lambda r: r["streams"], default=None)
        print(
            f"\n{workers} worker(s): "
            + (
                f"up to {best['streams']:.0f} concurrent streams, "
                f"{best['events_per_s']:,.0f} stream events/s within 5 ms p99"
                if best
                else "no point held 5 ms p99"
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
