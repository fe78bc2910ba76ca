"""`kvscope size`: the KV-cache arithmetic for one model on one GPU, worked so a person can follow it.

A human table by default, `--json` for machines. Bad input (unknown names, a malformed
config.json, weights that do not fit, utilisation outside (0, 1]) prints one line on stderr
and exits 2, without a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


def parse_bytes(text: str) -> int:
    """'1073741824', '11.47GiB', '40 GB' -> bytes (binary and decimal units both accepted)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 12884901888, 11.47GiB, 40GB)")
    return round(float(m.group(1)) * _UNITS[m.group(2).lower()])


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "size",
        help="KV-cache sizing: bytes per token, budget, blocks, concurrency, prefix sharing",
        description="Work out how much KV cache a model gets on a GPU and how many requests fit.",
    )
    p.add_argument(
        "--model", required=True, help="catalogue name (e.g. llama-3.1-70b) or a path to a config.json"
    )
    p.add_argument("--gpu", required=True, help="catalogue GPU (e.g. h100-80gb, a100-80gb, l4, mi300x)")
    p.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=int, default=1)
    p.add_argument("--kv-cache-dtype", default="auto", help="auto (16-bit), fp8, int8, bf16, fp16, fp32")
    p.add_argument("--weight-dtype", default="auto", help="auto (the checkpoint's), bf16, fp8, int4, mxfp4")
    p.add_argument(
        "--gpu-memory-utilization", type=float, default=None, help="share of GPU memory (default 0.9)"
    )
    p.add_argument(
        "--kv-budget",
        type=parse_bytes,
        default=None,
        help="KV bytes per GPU, bypassing the budget arithmetic (like vLLM's --kv-cache-memory-bytes)",
    )
    p.add_argument(
        "--overhead",
        type=parse_bytes,
        default=None,
        help="non-KV, non-weight memory per GPU (default 2GiB: activations, CUDA graphs, NCCL)",
    )
    p.add_argument(
        "--max-model-len", type=int, default=None, help="tokens reserved per request (default: the model's)"
    )
    p.add_argument(
        "--context-tokens", type=int, default=None, help="tokens a typical request holds (default 2048)"
    )
    p.add_argument("--concurrency", type=int, default=None, help="target concurrent requests")
    p.add_argument("--shared-prefix-tokens", type=int, default=None)
    p.add_argument("--sharing-requests", type=int, default=None)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from harness.advisor import sizing
    from harness.advisor.sizing_text import plan_json, render
    from reference_engine.catalogue import get_gpu, resolve_model

    try:
        model, gpu = resolve_model(args.model), get_gpu(args.gpu)
        result = sizing.plan(
            model,
            gpu,
            tp=args.tp,
            kv_dtype=args.kv_cache_dtype,
            weight_dtype=args.weight_dtype,
            utilisation=sizing.DEFAULT_GPU_MEMORY_UTILIZATION
            if args.gpu_memory_utilization is None
            else args.gpu_memory_utilization,
            overhead_bytes=sizing.DEFAULT_OVERHEAD_BYTES if args.overhead is None else args.overhead,
            kv_budget=args.kv_budget,
            max_model_len=args.max_model_len,
            context_tokens=args.context_tokens,
            concurrency=args.concurrency,
            shared_prefix_tokens=args.shared_prefix_tokens,
            sharing_requests=args.sharing_requests,
            block_size=args.block_size,
        )
    except ValueError as e:  # CatalogueError, SizingError: the operator's input, not a bug
        print(f"kvscope size: error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(plan_json(result, model), indent=2))
    else:
        print(render(result, model))
    return 0
