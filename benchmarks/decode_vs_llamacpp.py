"""SmolLM2-135M decode side by side with llama.cpp's llama-server, one compute thread each, in
one invocation, on the same GGUF file (Q4_1; kvscope dequantises it, llama.cpp computes on it).

Usage: python -m benchmarks.decode_vs_llamacpp [--streams 1,4,16,32] [--tokens 32] [--rounds 3]
                                               [--formats float32,fp16[,bfloat16]]

For each number of concurrent streams N, measured in turn (rounds alternate, each side's best
round kept):
- llama.cpp: `llama-server -t 1 -tb 1 -np N` (explicit slots: see docs/reference/llamacpp-server.md),
  N streaming requests through HTTP;
- kvscope HTTP: `kvscope engine serve --num-threads 1` (engine core in its own process), one
  server per weight format, the same N requests;
- kvscope in-process: the same engine driven by `LLMEngine.step` in this process, with the
  native decode stack (the default) and with `--enforce-eager` (every layer in Python).
Decode tokens/s is aggregate: over HTTP from the client's own token arrival times while all N
streams decode (`stream_client.decode_rate`), in-process from timed decode steps. Requests
use greedy decoding with ignore_eos, distinct prompts of ~12 tokens, `--tokens` tokens each.

Bytes per step: what a decode step must read (weights once, KV context once per layer;
`bandwidth.py`), and the bandwidth that implies at the measured step rate, next to this
machine's one-thread read and copy bandwidth.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks import bandwidth
from benchmarks.stream_client import Child, decode_rate, run_streams
from harness.run.procs import free_port, wait_http
from reference_engine.cache_root import kvscope_cache
from reference_engine.model_dtype import cpu_has_native_bf16

PROMPT_TOKENS = 12
WEIGHT_ONLY = ("int8", "fp16")  # `--quantization` formats over a float32 model
COMPUTE_DTYPES = ("float32", "bfloat16")  # plain model dtypes (`--dtype`)


def model_dtype(fmt: str) -> str:
    return fmt if fmt in COMPUTE_DTYPES else "float32"


def default_formats() -> str:
    """float32 and fp16, and bfloat16 where the CPU computes it natively (what `--dtype auto`
    picks there; elsewhere it is several times slower than float32 in batches)."""
    return "float32,fp16,bfloat16" if cpu_has_native_bf16() else "float32,fp16"


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def llama_server_binary() -> Path:
    return Path(
        os.environ.get("KVSCOPE_LLAMA_SERVER")
        or kvscope_cache() / "llama-server-0.3.36-noamx/bin/llama-server"
    )


@dataclass(slots=True)
class Row:
    side: str
    streams: int
    tokens_per_s: float
    step_bytes: int  # read per decode step (weights + KV)

    @property
    def step_ms(self) -> float:
        return 1e3 * self.streams / self.tokens_per_s

    @property
    def implied_gb_s(self) -> float:
        return self.step_bytes / (self.step_ms / 1e3) / 1e9


class LlamaServer:
    def __init__(self, binary: Path, gguf: str, slots: int):
        self.port = free_port()
        argv = [str(binary), "-m", gguf, "-t", "1", "-tb", "1", "-np", str(slots), "-c", str(slots * 256)]
        argv += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ok, reason = wait_http(f"{self.url}/health", 60)
        if not ok:
            self.stop()
            raise RuntimeError(f"llama-server did not start: {reason}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def kvscope_server(fmt: str, max_streams: int, tokens: int) -> Child:
    quant = ["--quantization", fmt] if fmt in WEIGHT_ONLY else []
    blocks = 1 + max_streams * -(-(PROMPT_TOKENS + tokens + 16) // 16)
    argv = [
        sys.executable,
        "-m",
        "reference_engine.server.serve_cli",
        "--port",
        "0",
        "--model",
        "smollm2-135m",
    ]
    argv += ["--num-threads", "1", "--max-num-seqs", str(max_streams), "--num-blocks", str(blocks)]
    argv += ["--dtype", model_dtype(fmt), *quant]
    return Child(argv, env=ENV)


def prompts(tokenizer, n: int) -> list[list[int]]:
    """n distinct prompts of PROMPT_TOKENS tokens (nothing shared, so nothing is cached)."""
    words = "sea ship wind sail storm harbour rope deck mast wave tide crew".split()
    out = []
    for i in range(n):
        ids = tokenizer.encode(f"Story {i}: the " + " ".join(words[(i + j) % len(words)] for j in range(12)))
        out.append(ids[:PROMPT_TOKENS])
    return out


def http_rate(url: str, ids: list[list[int]], tokens: int, extra: dict | None = None) -> float:
    """`extra`: more request fields, for one server only (vLLM's `return_token_ids`)."""
    bodies = [
        {
            "prompt": p,
            "max_tokens": tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            **(extra or {}),
        }
        for p in ids
    ]
    results, _ = run_streams(url, bodies)
    assert all(len(r.token_times) == tokens for r in results), [len(r.token_times) for r in results]
    return decode_rate(results)


def in_process_rate(
    loaded, ids: list[list[int]], tokens: int, max_streams: int, eager: bool = False
) -> float:
    import time

    from reference_engine.config import EngineConfig
    from reference_engine.engine_factory import build_engine
    from reference_engine.sampling_params import SamplingParams

    blocks = 1 + max_streams * -(-(PROMPT_TOKENS + tokens + 16) // 16)
    config = EngineConfig(
        model="smollm2-135m", num_blocks=blocks, max_num_seqs=max_streams, num_threads=1, enforce_eager=eager
    )
    engine = build_engine(config, loaded).engine
    for p in ids:
        engine.add_request(p, SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True))
    engine.step()  # prefill and the first token of every request; not timed
    t0 = time.perf_counter()
    for _ in range(tokens - 1):
        engine.step()
    seconds = time.perf_counter() - t0
    assert not engine.has_unfinished()
    return len(ids) * (tokens - 1) / seconds


def step_bytes_kvscope(loaded, n: int, tokens: int) -> int:
    mc = loaded.config
    contexts = [PROMPT_TOKENS + tokens // 2] * n
    kv_element = loaded.model.model.embed_tokens.weight.element_size()  # the cache's `auto`: the model dtype
    kv = bandwidth.kv_bytes_per_step(mc.num_layers, mc.num_kv_heads, mc.head_dim, kv_element, contexts)
    return bandwidth.weight_bytes_per_step(loaded.model, n) + kv


def step_bytes_llama(gguf: str, loaded, n: int, tokens: int) -> int:
    mc = loaded.config  # llama.cpp's KV cache is float16 by default
    contexts = [PROMPT_TOKENS + tokens // 2] * n
    kv = bandwidth.kv_bytes_per_step(mc.num_layers, mc.num_kv_heads, mc.head_dim, 2, contexts)
    return bandwidth.gguf_weight_bytes(gguf, n) + kv


def measure(streams: list[int], tokens: int, rounds: int, formats: list[str]) -> tuple[list[Row], str | None]:
    from reference_engine.model.builtin import smollm2_gguf_path
    from reference_engine.model.registry import load_model

    gguf = smollm2_gguf_path()
    loaded = {
        f: load_model("smollm2-135m", model_dtype(f), quantization=f if f in WEIGHT_ONLY else None)
        for f in formats
    }
    tokenizer = loaded[formats[0]].tokenizer
    binary = llama_server_binary()
    missing = None if binary.exists() else f"{binary} not found (build it with scripts/build_llama_server.sh)"
    servers = {f: kvscope_server(f, max(streams), tokens) for f in formats}
    best: dict[tuple[str, int], float] = {}

    def keep(side: str, n: int, rate: float) -> None:
        best[(side, n)] = max(rate, best.get((side, n), 0.0))

    try:
        for n in streams:
            ids = prompts(tokenizer, n)
            llama = None if missing else LlamaServer(binary, gguf, n)
            warm = [llama.url] if llama else []
            for url in warm + [s.url for s in servers.values()]:
                http_rate(url, ids[:2], 4)  # first requests pay one-time allocations
            try:
                for _ in range(rounds):
                    if llama:
                        keep("llama.cpp", n, http_rate(llama.url, ids, tokens))
                    for f in formats:
                        keep(f"{f} HTTP", n, http_rate(servers[f].url, ids, tokens))
                        keep(f"{f} in-process", n, in_process_rate(loaded[f], ids, tokens, max(streams)))
                        eager = in_process_rate(loaded[f], ids, tokens, max(streams), eager=True)
                        keep(f"{f} in-process eager", n, eager)
            finally:
                if llama:
                    llama.stop()
    finally:
        for server in servers.values():
            server.stop()
    rows = []
    for (side, n), rate in best.items():
        if side == "llama.cpp":
            rows.append(Row(side, n, rate, step_bytes_llama(gguf, loaded[formats[0]], n, tokens)))
        else:
            rows.append(Row(side, n, rate, step_bytes_kvscope(loaded[side.split()[0]], n, tokens)))
    return rows, missing


def markdown(
    rows: list[Row], streams: list[int], formats: list[str], tokens: int, missing: str | None
) -> str:
    rate = {(r.side, r.streams): r.tokens_per_s for r in rows}
    bw = bandwidth.copy_bandwidth()
    head = ["streams", "llama.cpp (-np N)"]
    for f in formats:
        head += [f"kvscope {f} HTTP", f"kvscope {f} in-process", "HTTP / in-process"]
    lines = [
        f"SmolLM2-135M-Instruct Q4_1 GGUF, one compute thread each (`-t 1 -tb 1`; `--num-threads 1`), "
        f"{PROMPT_TOKENS}-token prompts, {tokens} tokens per stream, greedy. Decode tokens/s, aggregate "
        "over the streams while all decode (client-side token arrival times for HTTP).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for n in streams:
        cells = [str(n), _fmt(rate.get(("llama.cpp", n)))]
        for f in formats:
            http, inproc = rate.get((f"{f} HTTP", n)), rate.get((f"{f} in-process", n))
            cells += [_fmt(http), _fmt(inproc), f"{http / inproc:.2f}" if http and inproc else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    if missing:
        lines += ["", f"llama.cpp was not measured: {missing}."]
    lines += [
        "",
        *targets(rate, formats),
        "",
        *native_gain(rate, streams, formats),
        "",
        *bytes_table(rows, bw),
    ]
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def targets(rate: dict, formats: list[str]) -> list[str]:
    lines = ["| target | measured | met |", "|---|---|---|"]
    for f in formats:
        http, inproc = rate.get((f"{f} HTTP", 16)), rate.get((f"{f} in-process", 16))
        if http and inproc:
            ratio = http / inproc
            lines.append(
                f"| {f}: HTTP / in-process >= 0.9 at 16 streams | {ratio:.2f} | {_met(ratio >= 0.9)} |"
            )
    for n, factor, what in (
        (1, 0.5, "batch-1 decode >= 0.5x llama.cpp's"),
        (16, 1.0, "aggregate at 16 streams >= llama.cpp -np 16"),
    ):
        llama = rate.get(("llama.cpp", n))
        ours = {f: rate.get((f"{f} HTTP", n)) for f in formats}
        f, value = max(((f, v) for f, v in ours.items() if v), key=lambda fv: fv[1], default=(None, None))
        if llama and value:
            lines.append(
                f"| {what} (best kvscope format over HTTP: {f}) | {value:.1f} vs {llama:.1f} tok/s = "
                f"{value / llama:.2f}x | {_met(value >= factor * llama)} |"
            )
    return lines


def native_gain(rate: dict, streams: list[int], formats: list[str]) -> list[str]:
    """In-process decode with the native decode stack against `--enforce-eager` (every layer in
    Python): the same arithmetic, so the ratio is what Python's cost per torch call took."""
    lines = [
        "In-process decode tokens/s with the native decode stack (the default) against "
        "`--enforce-eager` (the same torch ops called from Python), and the ratio:",
        "",
        "| streams | " + " | ".join(f"{f} native | {f} eager | ratio" for f in formats) + " |",
        "|---|" + "---|---|---|" * len(formats),
    ]
    for n in streams:
        cells = [str(n)]
        for f in formats:
            native, eager = rate.get((f"{f} in-process", n)), rate.get((f"{f} in-process eager", n))
            cells += [_fmt(native), _fmt(eager), f"{native / eager:.2f}x" if native and eager else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _met(ok: bool) -> str:
    return "met" if ok else "**MISSED**"


def bytes_table(rows: list[Row], bw: bandwidth.Bandwidth) -> list[str]:
    lines = [
        f"Memory traffic per decode step (weights read once, KV context once per layer) and the bandwidth it "
        f"implies at the measured rate. This machine, one thread: read {bw.read_gb_s:.1f} GB/s, copy "
        f"{bw.copy_gb_s:.1f} GB/s (read + write).",
        "",
        "| side | streams | MB per step | ms per step | implied GB/s | share of read bandwidth |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r.side, r.streams)):
        if "HTTP" in r.side and "in-process" not in r.side and r.side != "llama.cpp":
            continue  # the in-process rows are the engine's own step rate
        share = r.implied_gb_s / bw.read_gb_s
        cells = [
            r.side,
            str(r.streams),
            f"{r.step_bytes / 1e6:.0f}",
            f"{r.step_ms:.1f}",
            f"{r.implied_gb_s:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + f" | {share:.0%} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="1,4,16,32")
    ap.add_argument("--tokens", type=int, default=32, help="tokens per stream (default: %(default)s)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        # On a shared VM one pass of 31 decode steps swings by tens of percent, in either
        # side's disfavour; the best of a few alternating rounds is each side's own speed.
        help="alternating rounds, best kept per side (default: %(default)s)",
    )
    ap.add_argument(
        "--formats",
        default=default_formats(),
        help="kvscope weight formats: float32, bfloat16, int8, fp16 (default on this CPU: %(default)s)",
    )
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    streams = [int(s) for s in args.streams.split(",")]
    formats = args.formats.split(",")
    rows, missing = measure(streams, args.tokens, args.rounds, formats)
    print(markdown(rows, streams, formats, args.tokens, missing))


if __name__ == "__main__":
    main()
