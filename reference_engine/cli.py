"""`kvscope engine ...`: run the bundled paged engine. Import-light: torch loads in handlers."""

from __future__ import annotations

import argparse
import json
import sys
import time

from reference_engine.engine_args import add_engine_args, engine_config_from_args
from reference_engine.server.serve_cli import register_serve

DEMO_PROMPTS = [
    "The capital of France is",
    "Water boils at a temperature of",
    "The largest planet in the solar system is",
    "The author of Romeo and Juliet is",
    "The chemical symbol for gold is",
    "The first man to walk on the moon was",
    "The tallest mountain on Earth is",
    "The speed of light is about",
]


def register(subparsers) -> None:
    engine = subparsers.add_parser("engine", help="run the bundled paged reference engine")
    sub = engine.add_subparsers(dest="engine_command", metavar="SUBCOMMAND", required=True)
    gen = sub.add_parser(
        "generate",
        help="generate from prompts in-process and print throughput and KV statistics",
        description="Generate completions for a batch of prompts and report throughput and KV-cache "
        "statistics. With no PROMPT, a built-in batch of factual prompts is used.",
    )
    add_engine_args(gen, ("engine",))
    s = gen.add_argument_group("sampling")
    s.add_argument(
        "--max-tokens", type=int, default=32, help="tokens to generate per prompt (default: %(default)s)"
    )
    s.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default: %(default)s)")
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--n", type=int, default=1, help="completions per prompt (parallel sampling)")
    s.add_argument("--sampling-seed", type=int, help="seed for sampling")
    gen.add_argument("--chat", action="store_true", help="wrap each prompt in the model's chat template")
    gen.add_argument("--json", action="store_true", help="print completions and statistics as JSON")
    gen.add_argument("prompts", nargs="*", metavar="PROMPT")
    gen.set_defaults(func=run_generate)
    register_serve(sub)


def run_generate(args: argparse.Namespace) -> int:
    from reference_engine.engine_factory import build_engine
    from reference_engine.model.errors import ModelLoadError
    from reference_engine.sampling_params import SamplingParams

    try:
        built = build_engine(engine_config_from_args(args))
        params = SamplingParams(
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            n=args.n,
            seed=args.sampling_seed,
        )
        params.validate()
    except (ValueError, ModelLoadError) as exc:
        print(f"kvscope engine generate: error: {exc}", file=sys.stderr)
        return 2
    prompts = args.prompts or DEMO_PROMPTS
    if args.chat:
        prompts = [
            built.tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
            for p in prompts
        ]
    start = time.perf_counter()
    try:
        results = built.engine.generate(prompts, params)
    except ValueError as exc:
        print(f"kvscope engine generate: error: {exc}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - start
    stats = built.engine.stats.as_dict()
    out_tokens = sum(c.num_output_tokens for r in results for c in r.choices)
    summary = {
        "model": built.model_name,
        "num_blocks": built.num_blocks,
        "block_size": args.block_size,
        "kv_cache_dtype": built.kv_cache_dtype,
        "elapsed_s": round(elapsed, 3),
        "output_tokens": out_tokens,
        "output_tokens_per_s": round(out_tokens / elapsed, 1) if elapsed else None,
        **stats,
    }
    if args.json:
        completions = [
            {
                "prompt": p,
                "choices": [
                    {"text": t, "token_ids": c.output_token_ids, "finish_reason": c.status.value}
                    for t, c in zip(r.texts, r.choices)
                ],
            }
            for p, r in zip(prompts, results)
        ]
        print(json.dumps({"completions": completions, "stats": summary}, indent=2))
        return 0
    for p, r in zip(prompts, results):
        for t in r.texts:
            print(f"{p!r} -> {t!r}")
    hit = stats["prefix_cache_hits"] / stats["prefix_cache_queries"] if stats["prefix_cache_queries"] else 0.0
    print(
        f"\n{len(prompts)} prompts, {out_tokens} output tokens in {elapsed:.2f} s "
        f"({summary['output_tokens_per_s']} tok/s) | KV: {built.num_blocks} blocks x {args.block_size} "
        f"tokens, peak usage {stats['peak_kv_usage']:.1%}, preemptions {stats['num_preemptions']}, prefix "
        f"hits {stats['prefix_cache_hits']}/{stats['prefix_cache_queries']} tokens ({hit:.1%})"
    )
    return 0
