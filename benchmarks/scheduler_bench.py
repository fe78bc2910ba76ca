"""Scheduler + KV-manager time per step with N running requests and no model compute.

Usage: python benchmarks/scheduler_bench.py [--running 256] [--prompt-len 512] [--steps 200]
Prints a markdown row. Target (issue 2): <= 1 ms per step at 256 running requests.
"""

from __future__ import annotations

import argparse
import statistics
import time

from reference_engine.clock import HOST_CLOCK
from reference_engine.kv_manager import KVCacheManager, cdiv
from reference_engine.request import Request
from reference_engine.sampling_params import SamplingParams
from reference_engine.scheduler import Scheduler, SchedulerLimits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--running", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--block-size", type=int, default=16)
    args = ap.parse_args()
    bs = args.block_size
    num_blocks = 1 + args.running * cdiv(args.prompt_len + args.steps + 1, bs)
    kv = KVCacheManager(num_blocks, bs, enable_caching=True)
    sched = Scheduler(SchedulerLimits(args.running, args.running * args.prompt_len, 1 << 20), kv, HOST_CLOCK)
    params = SamplingParams(max_tokens=10_000)
    for i in range(args.running):
        prompt = [(i * 7919 + j) % 50_000 for j in range(args.prompt_len)]
        sched.add_request(Request(f"r{i}", prompt, len(prompt), params, 0.0))
    out = sched.schedule()  # the prefill step, not timed
    sched.update_from_output(out, {c.request.request_id: [1] for c in out.chunks})
    times = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        out = sched.schedule()
        sched.update_from_output(out, {c.request.request_id: [step % 1000 + 2] for c in out.chunks})
        times.append(time.perf_counter() - t0)
        assert len(out.chunks) == args.running and not out.preempted
    med, p99 = statistics.median(times) * 1e3, sorted(times)[int(0.99 * len(times))] * 1e3
    print("| running | prompt tokens | block size | median ms/step | p99 ms/step | target |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {args.running} | {args.prompt_len} | {bs} | {med:.3f} | {p99:.3f} | <= 1 ms: "
        f"{'met' if med <= 1 else 'MISSED'} |"
    )


if __name__ == "__main__":
    main()
