"""What the HTTP server costs, and how many streams one simulated server process sustains.

1. HTTP overhead: output tokens per second through the server (streaming, concurrent clients,
   the server in its own process) against the same engine driven in-process by
   `LLMEngine.generate`, on tiny-random. Target (issue 4): ratio >= 0.8.
2. Simulation capacity: for growing numbers of concurrent streams against one `--simulate`
   server process (Llama-3.1-70B on 4 x H100 by default), the measured time of full decode
   steps against the cost model's. The largest concurrency whose median step stays within 10%
   of the model is what one process sustains on this machine.

Usage: python -m benchmarks.server_overhead [overhead|sim|all] [--concurrency 100,250,500,1000]
Prints markdown tables. Client and server share this machine's cores, as in a real load test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

from benchmarks.stream_client import Child, pct, run_streams


def streamed(url: str, bodies: list[dict]) -> tuple[int, float, list[float]]:
    """(completion tokens, wall seconds, client inter-chunk gaps) of all bodies at once."""
    results, seconds = run_streams(url, bodies)
    return sum(r.completion_tokens for r in results), seconds, [g for r in results for g in r.gaps]


# -- 1. HTTP overhead on tiny-random ----------------------------------------------------------------


def overhead(args: argparse.Namespace) -> None:
    """Rounds alternate the two paths, and each path's best round counts: other work on a
    shared machine only ever slows a round down, so the best is the least disturbed."""
    from reference_engine.config import EngineConfig
    from reference_engine.engine_factory import build_engine
    from reference_engine.sampling_params import SamplingParams

    prompts = [f"Benchmark prompt number {i}: " + "lorem ipsum " * (i % 4 + 1) for i in range(args.requests)]
    config = ["--model", "tiny-random", "--num-blocks", "2048", "--max-num-seqs", str(args.requests)]
    built = build_engine(EngineConfig(model="tiny-random", num_blocks=2048, max_num_seqs=args.requests))
    params = SamplingParams(max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True)
    built.engine.generate(prompts[:2], SamplingParams(max_tokens=8, ignore_eos=True))  # warm-up
    bodies = [
        {
            "model": "tiny-random",
            "prompt": p,
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        for p in prompts
    ]
    child = Child([sys.executable, "-m", "reference_engine.server.serve_cli", "--port", "0", *config])
    in_rates, http_rates, all_gaps = [], [], []
    try:
        streamed(child.url, bodies[:2])  # warm-up
        for _ in range(args.rounds):
            start = time.perf_counter()
            results = built.engine.generate(prompts, params)
            in_rates.append(
                sum(c.num_output_tokens for r in results for c in r.choices) / (time.perf_counter() - start)
            )
            tokens, seconds, gaps = streamed(child.url, bodies)
            http_rates.append(tokens / seconds)
            all_gaps += gaps
    finally:
        child.stop()
    ratio = max(http_rates) / max(in_rates)
    total = args.requests * args.max_tokens
    print(
        f"\n### HTTP overhead (tiny-random, {args.requests} concurrent streams x {args.max_tokens} tokens, "
        f"best of {args.rounds} alternating rounds)\n"
    )
    print(
        "| path | output tokens per round | tokens/s best | tokens/s median | client inter-chunk p50 / p99 "
        "ms |"
    )
    print("|---|---|---|---|---|")
    print(
        f"| in-process `LLMEngine.generate` | {total} | {max(in_rates):,.0f} | "
        f"{statistics.median(in_rates):,.0f} | – |"
    )
    print(
        f"| HTTP streaming (server process) | {total} | {max(http_rates):,.0f} | "
        f"{statistics.median(http_rates):,.0f} | {pct(all_gaps, 0.5) * 1e3:.2f} / "
        f"{pct(all_gaps, 0.99) * 1e3:.2f} |"
    )
    print(
        f"\nratio (best / best) {ratio:.2f} (target >= 0.8: {'met' if ratio >= 0.8 else 'MISSED'}); "
        f"median / median {statistics.median(http_rates) / statistics.median(in_rates):.2f}"
    )


# -- 2. simulation capacity -------------------------------------------------------------------------


def sim_child(argv: list[str]) -> int:
    """Child mode: a --simulate server (engine core in its own process, as `kvscope engine
    serve` runs it) whose core writes its step records to a file when it stops."""
    from reference_engine.core.launch import CoreLaunch
    from reference_engine.core.process_client import ProcessCoreClient
    from reference_engine.engine_args import (
        add_engine_args,
        engine_config_from_args,
        simulator_config_from_args,
    )
    from reference_engine.serve_options import DEFAULT_SHUTDOWN_GRACE_S
    from reference_engine.server.app import create_app
    from reference_engine.server.serve_cli import serve
    from reference_engine.server.state import ServerConfig
    from reference_engine.sim.engine import load_sim_tokenizer

    ap = argparse.ArgumentParser()
    ap.add_argument("records")
    add_engine_args(ap, ("engine", "simulator"))
    a = ap.parse_args(argv)
    config, spec = engine_config_from_args(a), simulator_config_from_args(a)
    assert spec is not None, "the sim child is started with --simulate"
    client = ProcessCoreClient(CoreLaunch(config, spec, step_records_path=a.records))
    client.spawn()
    app = create_app(client, load_sim_tokenizer(), ServerConfig(spec.model, "simulated"))
    return asyncio.run(serve(app, "127.0.0.1", 0, DEFAULT_SHUTDOWN_GRACE_S))


def sim(args: argparse.Namespace) -> None:
    deployment = [
        "--simulate",
        "--sim-model",
        args.sim_model,
        "--sim-gpu",
        args.sim_gpu,
        "--tensor-parallel-size",
        str(args.tp),
        "--max-model-len",
        "4096",
        "--max-num-batched-tokens",
        "65536",
    ]
    rows, best = [], 0
    for c in [int(x) for x in args.concurrency.split(",")]:
        with tempfile.NamedTemporaryFile(suffix=".json") as records_file:
            child = Child(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.server_overhead",
                    "--sim-child",
                    records_file.name,
                    *deployment,
                    "--max-num-seqs",
                    str(c),
                ]
            )
            try:
                bodies = [
                    {
                        "model": args.sim_model,
                        "prompt": f"Stream {i} asks about " + "the sea " * (i % 8 + 2),
                        "max_tokens": args.sim_tokens,
                        "stream": True,
                        "stream_options": {"include_usage": True},
                    }
                    for i in range(c)
                ]
                tokens, wall, gaps = streamed(child.url, bodies)
            finally:
                child.stop()
            with open(records_file.name) as f:
                records = [
                    [r["num_seqs"], r["num_tokens"], r["modelled_s"], r["measured_s"]] for r in json.load(f)
                ]
        full = [
            r for r in records if r[0] >= 0.95 * c and r[1] == r[0]
        ]  # decode steps with (nearly) all streams
        modelled = statistics.median(r[2] for r in full) if full else float("nan")
        ratios = [r[3] / r[2] for r in full]
        med = statistics.median(ratios) if ratios else float("nan")
        ok = bool(ratios) and med <= 1.10 and tokens == c * args.sim_tokens
        best = max(best, c) if ok else best
        rows.append(
            f"| {c} | {len(full)} | {modelled * 1e3:.1f} | {modelled * med * 1e3:.1f} | {med:.2f} | "
            f"{pct(ratios, 0.9):.2f} | {tokens / wall:,.0f} | {pct(gaps, 0.5) * 1e3:.0f} / "
            f"{pct(gaps, 0.99) * 1e3:.0f} | {'yes' if ok else 'no'} |"
        )
    print(
        f"\n### Simulation capacity ({args.sim_model} on {args.tp} x {args.sim_gpu}, {args.sim_tokens} "
        "tokens per stream, one server process)\n"
    )
    print(
        "| streams | full decode steps | modelled ms/step | measured ms/step (median) | measured / modelled "
        "(median) | p90 | tokens/s | client ITL p50 / p99 ms | within 10% |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nlargest concurrency within 10% of the cost model: {best or 'none of those tried'}")


def main() -> None:
    # Both paths run torch with the same thread count, set before torch loads (in-process and
    # in the server child, which inherits the environment). One thread by default: with two
    # cores shared by client, server loop and engine, OpenMP's spinning threads otherwise make
    # the timings depend on whatever else runs on the machine.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if len(sys.argv) > 1 and sys.argv[1] == "--sim-child":
        sys.exit(sim_child(sys.argv[2:]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", nargs="?", default="all", choices=("overhead", "sim", "all"))
    ap.add_argument("--requests", type=int, default=16, help="concurrent streams for the overhead test")
    ap.add_argument("--max-tokens", type=int, default=256, help="tokens per request for the overhead test")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds per path for the overhead test")
    ap.add_argument(
        "--concurrency", default="100,250,500,750,1000,1500", help="stream counts for the sim test"
    )
    ap.add_argument("--sim-tokens", type=int, default=64, help="tokens per stream for the sim test")
    ap.add_argument("--sim-model", default="llama-3.1-70b")
    ap.add_argument("--sim-gpu", default="h100-80gb")
    ap.add_argument("--tp", type=int, default=4)
    args = ap.parse_args()
    if args.part in ("overhead", "all"):
        overhead(args)
    if args.part in ("sim", "all"):
        sim(args)


if __name__ == "__main__":
    main()
