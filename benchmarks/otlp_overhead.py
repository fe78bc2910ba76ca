"""What per-request server spans cost the client: a `traceparent` on every request plus the
run's OTLP receiver, against a run without the header whose receiver is not counted.

Both modes run `kvscope run --otlp` against the bundled engine in simulation mode (the cost
model of `harness_client_capacity`, so the server is cheap and the client's cost shows),
closed loop at each stream count, alternating modes within each repeat so drift on a shared
machine hits both alike. In both the engine exports vLLM's `llm_request` span per request
(OTLP/HTTP, the SDK's 5 s batches) to the run's receiver, so the server does the same work
and the machine carries the same load: what differs is only what the client pays for.
- without: `--no-traceparent`; client CPU = the Locust workers' (the receiver's CPU is left
  out: a run without spans has none).
- with spans: the header on every request; client CPU = the workers' plus the receiver's
  (it runs on the load generator's machine), every span decoded, written and joined.
Client CPU per request = that CPU over the steady window, divided by the requests sent in
it. Target: spans cost <= 5% more CPU per request. Medians over the repeats. The header's
own cost (a fresh trace id, the header dict) is also timed in-process, since on a shared
machine it is far below the run-to-run noise of the whole-run figure.

    .venv/bin/python benchmarks/otlp_overhead.py [--streams 64,256] [--repeats 2] [--duration 15s]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.harness_client_capacity import SIM_FLAGS, cpu_rate, is_locust_worker, sample_worker_cpu  # noqa: E402
from benchmarks.machine_info import machine  # noqa: E402
from harness.results import load  # noqa: E402
from harness.run.commands import kvscope_command  # noqa: E402
from harness.workload.record import RequestRecord  # noqa: E402
from harness.workload.trace_context import traceparent  # noqa: E402

TARGET = 0.05
MODES = {"without": ["--otlp", "--no-traceparent"], "with spans": ["--otlp"]}


def is_receiver(cmd: str) -> bool:
    return "harness.otlp.serve" in cmd


def is_client(cmd: str) -> bool:
    return is_locust_worker(cmd) or is_receiver(cmd)


def header_cost_us(n: int = 200_000) -> float:
    """Microseconds per request to make the traceparent and the per-request header dict."""
    rec = RequestRecord("r", "w", "chat", "chat", 0.0)
    base = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"}
    return timeit.timeit(lambda: {**base, "traceparent": traceparent(rec)}, number=n) / n * 1e6


def measure(mode: str, streams: int, duration: str, out: Path, output_tokens: int) -> dict:
    argv = kvscope_command(
        "run", "--quiet", "--workload", "long_context", "--users", str(streams), "--spawn-rate", str(streams),
        "--duration", duration, "--prompt-tokens", "128", "--output-tokens", str(output_tokens),
        "--no-calibrate", "--no-advise", "--out", str(out), *SIM_FLAGS, *MODES[mode],
    )  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    receiver: list = []
    side = threading.Thread(target=lambda: receiver.extend(sample_worker_cpu(proc, is_receiver)))
    side.start()
    samples = sample_worker_cpu(proc, is_client if mode == "with spans" else is_locust_worker)
    side.join()
    _, stderr = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} at {streams} streams failed: {stderr[-400:]}")
    r = load(out)
    m = r.measured[r.measured["ok"]]
    start, end = m["send_time_unix"].min() + 2.0, m["send_time_unix"].max()
    steady = m[(m["send_time_unix"] >= start) & (m["send_time_unix"] <= end)]
    per_s = len(steady) / (end - start)
    joined = (r.run.get("spans") or {}).get("join", {}).get("joined")
    return {
        "cpu_per_request_ms": cpu_rate(samples, start, end) / per_s * 1000,
        "receiver_ms": cpu_rate(receiver, start, end) / per_s * 1000,  # counted only "with spans"
        "req_per_s": per_s,
        "traced": bool(m["trace_id"].notna().all()),
        "joined_share": joined / len(r.requests[r.requests["ok"]]) if joined is not None else None,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", default="64,256")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--duration", default="15s")
    p.add_argument("--output-tokens", type=int, default=64)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kvscope-otlp-"))
    rows = []
    for streams in (int(s) for s in args.streams.split(",")):
        got: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for rep in range(args.repeats):
            order = list(MODES) if rep % 2 == 0 else list(reversed(MODES))
            for mode in order:
                got[mode].append(
                    measure(
                        mode,
                        streams,
                        args.duration,
                        tmp / f"{streams}-{rep}-{mode.replace(' ', '-')}",
                        args.output_tokens,
                    )
                )
        off, on = (statistics.median(x["cpu_per_request_ms"] for x in got[m]) for m in MODES)
        rows.append((streams, got, off, on))
        print(f"{streams} streams: {off:.3f} -> {on:.3f} ms CPU per request", file=sys.stderr, flush=True)
    print(
        f"Machine: {machine().line()}. {args.repeats} alternating repeats of {args.duration} per mode, "
        f"128-token prompts, {args.output_tokens} output tokens, closed loop, one Locust worker.\n"
    )
    print(
        "| streams | mode | req/s | client CPU per request | receiver CPU per request | every request traced "
        "| joined to a span |"
    )
    print("|---|---|---|---|---|---|---|")
    for streams, got, _, _ in rows:
        for mode in MODES:
            runs = got[mode]
            share = [x["joined_share"] for x in runs if x["joined_share"] is not None]
            print(
                f"| {streams} | {mode} | {statistics.median(x['req_per_s'] for x in runs):.1f} | "
                f"{statistics.median(x['cpu_per_request_ms'] for x in runs):.3f} ms | "
                f"{statistics.median(x['receiver_ms'] for x in runs):.3f} ms | "
                f"{'yes' if all(x['traced'] for x in runs) else 'no'} | "
                f"{f'{min(share):.0%}' if share else '–'} |"
            )
    header_us = header_cost_us()
    print(
        f"\nThe header alone: {header_us:.2f} µs per request in-process (trace id, span id, header dict).\n"
    )
    for streams, _, off, on in rows:
        extra = on / off - 1
        verdict = "within" if extra <= TARGET else "over"
        print(
            f"- {streams} streams: spans cost {extra:+.1%} client CPU per request ({verdict} the 5% target)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
