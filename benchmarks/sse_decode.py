"""The load generator's per-chunk parsing, offline (no sockets): JSON decoders on real chunks,
and the whole per-chunk path of the reference line reader against the fast path.

    python -m benchmarks.sse_decode [--chunks 200000]

Chunks are the real ones recorded from the bundled engine and llama-server
(tests/fixtures/engine, tests/fixtures/llamacpp): a mid-stream token chunk of each endpoint.
Decoders: json.loads, orjson.loads (when installed; not a kvscope dependency), msgspec to a
dict, msgspec into the fast path's structs (what `sse_blocks` uses). The paths: 128-token
streams of the engine's completion chunk, each event arriving as its own read, through
`sse.consume` (a readline per line, a dict per chunk) and `sse_blocks.take_lines`; both make
the same record (tests/harness/workload/test_sse_blocks.py). Times are per chunk, the best of
five rounds (the machine is shared; the best round is the least disturbed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine_info import machine  # noqa: E402
from harness.workload.record import RequestRecord  # noqa: E402
from harness.workload.sse import StreamState, consume, finish  # noqa: E402
from harness.workload.sse_blocks import Chunk, take_lines  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
SAMPLES = {
    "engine completions": FIXTURES / "engine" / "completions_stream_include_usage.sse",
    "engine chat": FIXTURES / "engine" / "chat_stream_include_usage.sse",
    "llama.cpp chat": FIXTURES / "llamacpp" / "chat_stream_include_usage.sse",
}
TOKENS = 128


def token_chunk(path: Path) -> bytes:
    """The third data line's JSON (a mid-stream token chunk, not the first or the last)."""
    lines = [line for line in path.read_bytes().splitlines() if line.startswith(b"data: {")]
    return lines[2][len(b"data: ") :]


def best_us(fn: Callable[[], object], n: int) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best * 1e6


def decoders() -> dict[str, Callable[[bytes], object]]:
    out: dict[str, Callable[[bytes], object]] = {
        "json.loads": json.loads,
        "msgspec, to a dict": msgspec.json.Decoder().decode,
        "msgspec, typed (kvscope)": msgspec.json.Decoder(Chunk).decode,
    }
    try:
        import orjson

        out["orjson.loads"] = orjson.loads
    except ImportError:
        pass
    return out


def stream_events(chunk: bytes) -> list[bytes]:
    return [b"data: " + chunk + b"\n\n"] * TOKENS + [b"data: [DONE]\n\n"]


def reference_stream(events: list[bytes]) -> None:
    lines = iter([line + b"\n" for event in events for line in event.split(b"\n")[:-1]])
    state, rec = StreamState(start=0.0), RequestRecord("w-1", "w", "bench", "completions", 0.0)
    consume(lambda _sep: next(lines, b""), time.perf_counter, state, rec)
    finish(state, rec)


def fast_stream(events: list[bytes]) -> None:
    state, rec = StreamState(start=0.0), RequestRecord("w-1", "w", "bench", "completions", 0.0)
    buf = bytearray()
    for event in events:
        buf += event
        if take_lines(buf, time.perf_counter(), state, rec):
            break
    state.end = time.perf_counter()
    finish(state, rec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=200_000, help="decodes per round")
    args = ap.parse_args(argv)
    started = machine().line()
    chunks = {name: token_chunk(path) for name, path in SAMPLES.items()}
    rows = ["| decoder | " + " | ".join(f"{n} ({len(c)} B)" for n, c in chunks.items()) + " |"]
    rows.append("|---|" + "---|" * len(chunks))
    for label, fn in decoders().items():
        cells = [f"{best_us(lambda c=c, fn=fn: fn(c), args.chunks):.2f} us" for c in chunks.values()]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
    events = stream_events(chunks["engine completions"])
    streams = max(1, args.chunks // (TOKENS * 4))
    ref = best_us(lambda: reference_stream(events), streams) / TOKENS
    fast = best_us(lambda: fast_stream(events), streams) / TOKENS
    print(f"Command: `python -m benchmarks.sse_decode --chunks {args.chunks}`. Machine: {started}.")
    print()
    print("JSON decoding of one streamed chunk (best of 5 rounds, per chunk):")
    print()
    print("\n".join(rows))
    print()
    print(f"The whole per-chunk path, {TOKENS}-token streams of the engine's completion chunk, one read")
    print("per event (the reference reads lines from memory here, cheaper than geventhttpclient's readline):")
    print()
    print("| path | per chunk |")
    print("|---|---|")
    print(f"| reference: `sse.consume`, a readline per line, a dict per chunk | {ref:.2f} us |")
    fast_row = f"| fast: `sse_blocks.take_lines`, a read at a time, typed structs | {fast:.2f} us"
    print(f"{fast_row} ({ref / fast:.1f}x less) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
