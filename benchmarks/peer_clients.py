"""Streaming load generators side by side against one simulated server: kvscope, the floor
(bare-readline: gevent greenlets reading the stream with geventhttpclient's readline(b"\\n")
and doing nothing else), a plain Locust FastHttpUser reading the same way, an asyncio +
aiohttp client (the design of `vllm bench serve`), and AIPerf and GuideLLM when `make
bench-peers` has installed them; with --baseline, also kvscope as an earlier checkout has it.

    python -m benchmarks.peer_clients [--streams 64,256] [--seconds 18] [--baseline DIR] [--out FILE]

One server for every client: the bundled engine in simulation mode (a GPU cost model, no
compute: Llama 3.1 70B on 8 x H100, a pool so large that KV never limits), so the client is
what saturates. Every client runs a closed loop of N concurrent streams for --seconds with
the same requests (each client --repeats times per load, interleaved, medians shown):
completions of 128 words (one token each for the server's tokenizer),
128 tokens out (ignore_eos), one token per chunk. Columns, measured the same way for every
client:
- requests: the server's finished-request counter over the client's run;
- output tok/s: the server's generated-token counter over the steady window (from
  WARM_S after the first token to WARM_S + WINDOW_S);
- TTFT p50/p99 and ITL (each request's mean gap between tokens, then the mean over
  requests: AIPerf's and GuideLLM's definition), as the client measured them (its own
  per-request records or its own export);
- client - server TTFT: the client's mean TTFT minus the server's mean TTFT over the same
  requests (the server's TTFT histogram: sum and count increases over the run);
- client CPU us / chunk: CPU time (user + system) of the client's processes over the
  steady window, divided by the chunks the server streamed in that window.
Client and server share this machine's cores, so the figures include the contention a real
single-machine test has; the machine and its load are stated with the table. The clients run
one after another at each load, in the order of --clients.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine_info import machine  # noqa: E402
from benchmarks.peers.clients import CLIENTS, Client, kvscope_from  # noqa: E402
from benchmarks.peers.result import Result  # noqa: E402
from harness.run.commands import engine_command  # noqa: E402
from harness.run.procs import free_port, http_get, wait_http  # noqa: E402

WARM_S = 3.0  # after the first generated token, before the CPU window opens
WINDOW_S = 10.0
MODEL = "llama-3.1-70b"
SIM_FLAGS = (
    "--simulate", "--sim-model", MODEL, "--sim-gpu", "h100-80gb", "--tensor-parallel-size", "8",
    "--max-model-len", "4096", "--max-num-seqs", "1024", "--max-num-batched-tokens", "65536",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ServerCounters:
    finished: float
    generated: float
    ttft_sum: float
    ttft_count: float


def counters(url: str) -> ServerCounters:
    _, body = http_get(url + "/metrics", 10.0)

    def total(name: str) -> float:
        pattern = re.compile(rf"^{re.escape(name)}(?:\{{[^}}]*\}})?\s+([0-9.eE+-]+)$", re.M)
        return sum(float(v) for v in pattern.findall(body.decode()))

    return ServerCounters(
        total("vllm:request_success_total"),
        total("vllm:generation_tokens_total"),
        total("vllm:time_to_first_token_seconds_sum"),
        total("vllm:time_to_first_token_seconds_count"),
    )


def tree_cpu_s(pid: int, skip: tuple[str, ...]) -> float:
    """CPU seconds used so far by the process and its descendants (minus those whose command
    line contains one of `skip`: the sidecar, not the client)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return float("nan")
    used = 0.0
    for p in procs:
        try:
            if any(s in " ".join(p.cmdline()) for s in skip):
                continue
            t = p.cpu_times()
            used += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            continue
    return used


def wait_for_load(url: str, before: float, proc: subprocess.Popen, timeout_s: float = 180.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if counters(url).generated > before:
            return True
        time.sleep(0.25)
    return False


def measure(client: Client, url: str, streams: int, seconds: float, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    argv, env = client.command(url, MODEL, streams, seconds, work)
    start = counters(url)
    log = open(work / "client.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, cwd=client.cwd, env={**os.environ, **env}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        if not wait_for_load(url, start.generated, proc):
            return {"error": f"no load (exit {proc.poll()}): {(work / 'client.log').read_text()[-300:]}"}
        time.sleep(WARM_S)
        c1, g1, t1 = tree_cpu_s(proc.pid, client.not_client), counters(url).generated, time.monotonic()
        time.sleep(WINDOW_S)
        c2, g2, t2 = tree_cpu_s(proc.pid, client.not_client), counters(url).generated, time.monotonic()
        proc.wait(timeout=seconds + 240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    end = counters(url)
    result: Result = client.parse(work)
    server_ttft = (end.ttft_sum - start.ttft_sum) / max(1.0, end.ttft_count - start.ttft_count)
    return {
        "requests": end.finished - start.finished,
        "tok_s": (g2 - g1) / (t2 - t1),
        "ttft_p50_ms": result.ttft_p50_s * 1000,
        "ttft_p99_ms": result.ttft_p99_s * 1000,
        "itl_ms": result.itl_mean_s * 1000,
        "gap_ms": (result.ttft_mean_s - server_ttft) * 1000,
        "cpu_us_chunk": (c2 - c1) / max(1.0, g2 - g1) * 1e6,
    }


def median_run(runs: list[dict]) -> dict:
    """Each figure's median over the repeats that worked (the error when none did)."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[0]
    return {k: float(np.median([r[k] for r in good])) for k in good[0]} | {"repeats": len(good)}


def table(rows: list[tuple[str, int, dict]]) -> str:
    head = (
        "| client | streams | requests | output tok/s | TTFT p50 ms | TTFT p99 ms "
        "| ITL ms (per-request mean) | client - server TTFT ms | client CPU us / chunk |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for name, streams, r in rows:
        if "error" in r:
            lines.append(f"| {name} | {streams} | {r['error'][:120]} | | | | | | |")
            continue
        lines.append(
            f"| {name} | {streams} | {r['requests']:.0f} | {r['tok_s']:,.0f} | {r['ttft_p50_ms']:.0f} | "
            f"{r['ttft_p99_ms']:.0f} | {r['itl_ms']:.1f} | {r['gap_ms']:+.0f} | {r['cpu_us_chunk']:.0f} |"
        )
    return "\n".join(lines)


NOT_PEERS = ("kvscope", "kvscope-baseline", "bare-readline")  # ours, ours before, the floor
CPU_TARGET_US = 20.0  # client CPU per chunk at 256 streams
FLOOR_RATIO = 2.0  # kvscope's CPU per chunk over the bare read loop's


def verdict(rows: list[tuple[str, int, dict]]) -> list[str]:
    """Does kvscope stay ahead of every peer on the TTFT gap and the CPU per chunk, how far is
    it from the bare read loop, and (with --baseline) did the gap grow against the baseline?"""
    out = []
    for streams in sorted({s for _, s, _ in rows}):
        at = {n: r for n, s, r in rows if s == streams and "error" not in r}
        ours = at.get("kvscope")
        if ours is None:
            continue
        for key, label in (("gap_ms", "client - server TTFT"), ("cpu_us_chunk", "client CPU per chunk")):
            peers = {n: r[key] for n, r in at.items() if n not in NOT_PEERS}
            best = min(peers.items(), key=lambda kv: abs(kv[1])) if peers else None
            ahead = best is None or abs(ours[key]) < abs(best[1])
            out.append(
                f"- {streams} streams, {label}: kvscope {ours[key]:.0f}"
                + (f" vs best peer {best[0]} {best[1]:.0f}" if best else "")
                + (": ahead" if ahead else ": NOT ahead")
            )
        cpu = ours["cpu_us_chunk"]
        if "bare-readline" in at:
            ratio = cpu / at["bare-readline"]["cpu_us_chunk"]
            out.append(
                f"- {streams} streams, CPU per chunk over the bare read loop's: {ratio:.2f}x "
                f"(target <= {FLOOR_RATIO:g}x: {'met' if ratio <= FLOOR_RATIO else 'NOT met'})"
            )
        if streams == 256:
            out.append(
                f"- 256 streams, kvscope's client CPU per chunk {cpu:.1f} us "
                f"(target <= {CPU_TARGET_US:g}: {'met' if cpu <= CPU_TARGET_US else 'NOT met'})"
            )
        if "kvscope-baseline" in at:
            base = at["kvscope-baseline"]
            out.append(
                f"- {streams} streams, against the baseline checkout: client - server TTFT "
                f"{ours['gap_ms']:+.0f} vs {base['gap_ms']:+.0f} ms, CPU per chunk {cpu:.1f} vs "
                f"{base['cpu_us_chunk']:.1f} us"
            )
    return out


def _skipped(client: Client, skipped: list[str]) -> bool:
    missing = client.missing()
    if missing:
        skipped.append(f"{client.name}: {missing}")
    return bool(missing)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="64,256")
    ap.add_argument("--seconds", type=float, default=WARM_S + WINDOW_S + 5.0)
    ap.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help=f"which clients, of {', '.join(CLIENTS)} (default: all; AIPerf and GuideLLM only "
        "where `make bench-peers` installed them)",
    )
    ap.add_argument("--repeats", type=int, default=3, help="runs of each client per load; medians shown")
    ap.add_argument("--out", help="also write the markdown here")
    ap.add_argument(
        "--baseline",
        type=Path,
        help="another checkout of kvscope (an earlier commit): adds its kvscope as the row "
        "kvscope-baseline, for a before/after in one run",
    )
    args = ap.parse_args(argv)
    clients = dict(CLIENTS)
    if args.baseline:
        if not (args.baseline / "harness" / "cli").is_dir():
            ap.error(f"--baseline {args.baseline}: not a kvscope checkout (no harness/cli)")
        clients["kvscope-baseline"] = kvscope_from(args.baseline.resolve())
    wanted = args.clients.split(",") + (["kvscope-baseline"] if args.baseline else [])
    if unknown := [n for n in wanted if n not in clients]:
        ap.error(f"unknown client(s) {', '.join(unknown)}; known: {', '.join(clients)}")
    started, t0 = machine().line(), time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="kvscope-peers-"))
    port = free_port()
    with open(work / "server.log", "wb") as log:
        server = subprocess.Popen(engine_command(None, list(SIM_FLAGS), port), cwd=ROOT, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    rows: list[tuple[str, int, dict]] = []
    skipped: list[str] = []
    try:
        ok, reason = wait_http(url + "/health", 180.0)
        if not ok:
            raise SystemExit(f"the simulated server did not start: {reason}")
        names = [n for n in wanted if not _skipped(clients[n], skipped)]
        for streams in (int(s) for s in args.streams.split(",")):
            runs: dict[str, list[dict]] = {n: [] for n in names}
            for rep in range(args.repeats):  # every client at one load in turn, then again
                for name in names:
                    print(f"[peers] {name} at {streams} streams ({rep + 1}/{args.repeats})", file=sys.stderr)
                    work_dir = work / f"{name}-{streams}-{rep}"
                    runs[name].append(measure(clients[name], url, streams, args.seconds, work_dir))
            rows += [(name, streams, median_run(runs[name])) for name in names]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    md = "\n".join(
        [
            "Command: `python -m benchmarks.peer_clients "
            f"--streams {args.streams} --seconds {args.seconds:g} --repeats {args.repeats}` "
            f"({time.monotonic() - t0:.0f} s). Machine: {started}.",
            "",
            table(rows),
            "",
            *verdict(rows),
            *(
                ["", "Not run: " + "; ".join(skipped) + " (`make bench-peers` installs them)."]
                if skipped
                else []
            ),
        ]
    )
    print(md)
    if args.out:
        Path(args.out).write_text(md + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
