"""KV event subscriber benchmark: block events per second on one core.

The stream: vLLM-shaped batches (one per engine step) from a model of a 16,384-block pool
under a shared-prefix load (400 system prompts of 32 blocks, Zipf-popular, each request 8
blocks of its own): BlockStored events with their token ids (16 per block) and parent
links, BlockRemoved one per evicted hash, so capacity misses and the curve are exercised.
The payloads are encoded once with the reference engine's structures (vLLM 0.33's) and then:

1. decoded in a bare loop with `msgspec.msgpack.Decoder(KVEventBatch)` (what vLLM's example
   subscriber does), and with the schema-less `msgspec.msgpack.decode`;
2. fed to the subscriber's state in-process (`SourceState.live_frames`: decode, sequence
   check, cached set, capacity misses, the miss-ratio curve), no sockets;
3. sent by a publisher process over ZeroMQ (PUB on loopback) to the exporter's subscriber
   thread in this process: the rate the subscriber sustains end to end, with no batch lost.

A block event is one hash in a BlockStored or BlockRemoved. Target: the subscriber sustains
>= 100,000 block events per second on one core, checked per CPU second of its process (one
Python thread does the work; on a shared machine wall time also counts other processes'
turns, so both are reported).

Usage: python benchmarks/kv_events_bench.py [--batches 10000]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402

from exporter.kv_events.source import SourceState  # noqa: E402
from exporter.kv_events.spec import KvEventsSource  # noqa: E402
from exporter.kv_events.subscriber import Subscriber  # noqa: E402
from reference_engine.kv_events.events import BlockRemoved, BlockStored, KVEventBatch  # noqa: E402

POOL = 16_384
PREFIXES, PREFIX_BLOCKS, OWN_BLOCKS, BLOCK = 400, 32, 8, 16
REQUESTS_PER_STEP = 4
TARGET = 100_000


def stream(batches: int, seed: int = 0) -> tuple[list[bytes], int]:
    """(payloads, block events) of `batches` engine steps (see the module doc)."""
    rng = random.Random(seed)
    lru: OrderedDict[int, None] = OrderedDict()
    enc = msgspec.msgpack.Encoder()
    payloads, block_events, fresh = [], 0, 1 << 40
    weights = [1 / (i + 1) for i in range(PREFIXES)]
    for _ in range(batches):
        events = []
        for g in rng.choices(range(PREFIXES), weights, k=REQUESTS_PER_STEP):
            chain = [(g << 20) | i for i in range(PREFIX_BLOCKS)]
            hit = 0
            while hit < len(chain) and chain[hit] in lru:
                lru.move_to_end(chain[hit])
                hit += 1
            new = chain[hit:] + [fresh + i for i in range(OWN_BLOCKS)]
            fresh += OWN_BLOCKS
            for h in new:
                if len(lru) >= POOL:
                    old, _ = lru.popitem(last=False)
                    events.append(BlockRemoved([old], "GPU", group_idx=0))
                    block_events += 1
                lru[h] = None
            parent = chain[hit - 1] if hit else None
            tokens = [rng.randrange(50_000) for _ in range(len(new) * BLOCK)]
            events.append(BlockStored(new, parent, tokens, BLOCK, None, "GPU", None, [None] * len(new), 0))
            block_events += len(new)
        payloads.append(enc.encode(KVEventBatch(ts=time.time(), events=events, data_parallel_rank=0)))
    return payloads, block_events


def rate(label: str, seconds: float, cpu: float, blocks: int, payloads: list[bytes]) -> tuple[str, ...]:
    mb = sum(map(len, payloads)) / 1e6
    return (
        label,
        f"{blocks / seconds:,.0f}",
        f"{blocks / cpu:,.0f}",
        f"{len(payloads) / seconds:,.0f}",
        f"{mb / seconds:,.1f}",
        f"{seconds:.2f} / {cpu:.2f}",
    )


def timed(fn) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def bare(payloads: list[bytes]) -> tuple[tuple[float, float], tuple[float, float]]:
    typed = msgspec.msgpack.Decoder(KVEventBatch)
    return (
        timed(lambda: [typed.decode(p) for p in payloads]),
        timed(lambda: [msgspec.msgpack.decode(p) for p in payloads]),
    )


def in_process(payloads: list[bytes]) -> tuple[tuple[float, float], SourceState]:
    state = SourceState(KvEventsSource("bench", "tcp://127.0.0.1:1"))
    frames = [[b"kv", seq.to_bytes(8, "big"), p] for seq, p in enumerate(payloads)]
    return timed(lambda: [state.live_frames(f, 0.0) for f in frames]), state


PUBLISHER = """
import sys, time, zmq
path, endpoint = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
payloads, off = [], 0
while off < len(data):
    n = int.from_bytes(data[off:off + 4], "big"); payloads.append(data[off + 4:off + 4 + n]); off += 4 + n
ctx = zmq.Context(); pub = ctx.socket(zmq.PUB); pub.setsockopt(zmq.SNDHWM, 0); pub.connect(endpoint)
time.sleep(1.0)
for seq, p in enumerate(payloads):
    pub.send_multipart([b"kv", seq.to_bytes(8, "big"), p])
time.sleep(2.0); pub.close(linger=5000); ctx.term()
"""


def over_zeromq(payloads: list[bytes], tmp: Path) -> tuple[float, float, SourceState]:
    """The publisher connects to the subscriber's bound SUB (kvscope run's arrangement); the
    clock runs from the first batch received to the last."""
    path = tmp / "payloads.bin"
    path.write_bytes(b"".join(len(p).to_bytes(4, "big") + p for p in payloads))
    state = SourceState(KvEventsSource("bench", "tcp://127.0.0.1:*", topic="kv", bind=True))
    sub = Subscriber(state).start()
    proc = subprocess.Popen([sys.executable, "-c", PUBLISHER, str(path), sub.bound_endpoint])
    try:
        while state.stream.applied == 0:
            time.sleep(0.001)
        t0, c0 = time.perf_counter(), time.process_time()
        deadline = t0 + 300
        while state.stream.expected != len(payloads) and time.perf_counter() < deadline:
            time.sleep(0.001)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        proc.wait(60)
        sub.stop()
    return seconds, cpu, state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=10_000)
    args = parser.parse_args()
    payloads, blocks = stream(args.batches)
    per_batch = blocks / len(payloads)
    (typed_s, typed_cpu), (generic_s, generic_cpu) = bare(payloads)
    (inproc_s, inproc_cpu), state = in_process(payloads)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        zmq_s, zmq_cpu, zstate = over_zeromq(payloads, Path(tmp))
    tier = state.instances["0"].tiers["GPU"]
    rows = [
        rate(
            "bare decode: msgspec Decoder(KVEventBatch) (vLLM's structures)",
            typed_s,
            typed_cpu,
            blocks,
            payloads,
        ),
        rate("bare decode: msgspec.msgpack.decode (schema-less)", generic_s, generic_cpu, blocks, payloads),
        rate(
            "subscriber state, in-process (decode + cached set + curve)",
            inproc_s,
            inproc_cpu,
            blocks,
            payloads,
        ),
        rate("subscriber over ZeroMQ (publisher process -> SUB thread)", zmq_s, zmq_cpu, blocks, payloads),
    ]
    print(
        f"{len(payloads):,} batches, {blocks:,} block events ({per_batch:.0f} per batch; "
        f"{sum(map(len, payloads)) / len(payloads):,.0f} bytes per batch); pool {POOL:,} blocks, "
        f"{PREFIXES} prefixes of {PREFIX_BLOCKS} blocks. The subscriber ended with {len(tier.cached):,} "
        f"cached blocks, {tier.capacity_misses:,} capacity misses; over ZeroMQ it applied "
        f"{zstate.stream.applied:,} batches, problems {zstate.problems or 'none'}.\n"
    )
    print("| path | block events/s | per CPU s | batches/s | MB/s | wall / CPU s |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    zmq_cpu_rate, zmq_wall_rate = blocks / zmq_cpu, blocks / zmq_s
    lost = zstate.stream.applied != len(payloads) or bool(zstate.problems)
    print()
    print("| acceptance check | measured | target | met |")
    print("|---|---|---|---|")
    print(
        f"| subscriber over ZeroMQ, block events per second of one core (CPU time) | {zmq_cpu_rate:,.0f} | "
        f">= {TARGET:,} | {'met' if zmq_cpu_rate >= TARGET and not lost else '**MISSED**'} |"
    )
    missing = len(payloads) - zstate.stream.applied
    print(f"| batches lost | {missing} | 0 | {'met' if not lost else '**MISSED**'} |")
    print(
        f"\nPer CPU second is what one core sustains: the subscriber is one Python thread (plus libzmq's "
        f"I/O thread, counted too), so its CPU time is that core's. Wall-clock rates also count the "
        f"turns other processes took on this shared machine (here {zmq_wall_rate:,.0f} block events/s "
        f"over ZeroMQ in {zmq_s:.1f} s of wall time for {zmq_cpu:.1f} s of CPU). The bare typed decode "
        "builds every token id as a Python int, which the subscriber skips (it keeps them raw, "
        "`msgspec.Raw`); the subscriber's extra work is the cached set, the distances and the curve."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
