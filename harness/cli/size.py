"""`kvscope size`: the KV-cache arithmetic for one model on one GPU, worked so a person can follow it.

A human table by default, `--json` for machines. Bad input (unknown names, a malformed
config.json, weights that do not fit, utilisation outside (0, 1]) prints one line on stderr
and exits 2, without a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from typing import Any

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
        print(json.dumps(to_json(result, model), indent=2))
    else:
        print(render(result, model))
    return 0


def to_json(result: Any, model: Any) -> dict[str, Any]:
    out = dataclasses.asdict(result)
    if result.prefix is not None:
        out["prefix"].update(bytes_saved=result.prefix.bytes_saved, blocks_saved=result.prefix.blocks_saved)
    out["attention"] = model.attention
    return out


def _requests(n: int) -> str:
    return f"{n:,} request" + ("" if n == 1 else "s")


def _size(n: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def _per_token_formula(r: Any, m: Any) -> str:
    b = r.kv_bytes_per_token // (
        m.num_layers
        * ((m.kv_lora_rank + m.qk_rope_head_dim) if m.attention == "mla" else 2 * m.num_kv_heads * m.head_dim)
    )
    if m.attention == "mla":
        return f"{m.num_layers} layers x ({m.kv_lora_rank} latent + {m.qk_rope_head_dim} rope) x {b} B"
    return f"2 (K,V) x {m.num_layers} layers x {m.num_kv_heads} KV heads x {m.head_dim} head_dim x {b} B"


def render(r: Any, m: Any) -> str:
    """The worked example, one line per step, numbers right-aligned after '='."""
    rows: list[tuple[str, str]] = []

    def row(label: str, value: str = "") -> None:
        rows.append((label, value))

    row(
        f"{r.model} on {r.gpu}, tp={r.tp}, KV dtype {r.kv_dtype}, weights {r.weight_dtype}, block {r.block_size} tokens"
    )
    row("KV bytes per token")
    row("  " + _per_token_formula(r, m), f"{r.kv_bytes_per_token:,} B ({_size(r.kv_bytes_per_token)})")
    heads = (
        "MLA latent kept whole on each GPU"
        if m.attention == "mla"
        else f"{m.kv_heads_per_rank(r.tp)} KV heads per GPU"
    )
    row(f"  per GPU at tp={r.tp} ({heads})", f"{r.kv_bytes_per_token_per_gpu:,} B")
    if m.num_sliding_layers:
        row(
            f"  {m.num_sliding_layers} of {m.num_layers} layers slide over {m.sliding_window:,} tokens: "
            f"at {r.context_tokens:,} tokens",
            f"{r.used_bytes_per_request / r.context_tokens:,.0f} B/token",
        )
    row("Memory per GPU")
    if r.budget_given:
        row("  KV budget given (--kv-budget)", _size(r.kv_budget_bytes))
    else:
        usable = int(r.gpu_memory_bytes * r.utilisation)
        row(f"  {_size(r.gpu_memory_bytes)} x {r.utilisation:g} utilisation", _size(usable))
        dtype = m.native_weight_dtype if r.weight_dtype == "auto" else r.weight_dtype
        row(
            f"  - weights ({m.total_params / 1e9:,.2f} B params in {dtype} / tp {r.tp})",
            _size(r.weight_bytes_per_gpu),
        )
        row("  - overhead (activations, CUDA graphs, NCCL; --overhead)", _size(r.overhead_bytes))
        row("  = KV budget", _size(r.kv_budget_bytes))
    row(f"  block = {r.block_size} tokens x {r.kv_bytes_per_token_per_gpu:,} B", _size(r.block_bytes))
    row(
        f"  {_size(r.kv_budget_bytes)} // {_size(r.block_bytes)}",
        f"{r.num_blocks:,} blocks = {r.token_capacity:,} tokens",
    )
    row(f"Per request (max model len {r.max_model_len:,}, context {r.context_tokens:,})")
    row(
        f"  reserved up front for {r.max_model_len:,} tokens (contiguous)",
        _size(r.reserved_bytes_per_request),
    )
    row(f"  really used by {r.context_tokens:,} tokens", _size(r.used_bytes_per_request))
    row("  idle share of the reservation", f"{r.idle_share:.1%}")
    row(f"  blocks per request (ceil({r.context_tokens:,} / {r.block_size}))", f"{r.blocks_per_request:,}")
    row(
        "  slack in the last block (this request / at most)",
        f"{r.last_block_slack} / {r.max_last_block_slack} tokens",
    )
    row("Concurrency")
    row(
        f"  contiguous: {_size(r.kv_budget_bytes)} // {_size(r.reserved_bytes_per_request)}",
        _requests(r.fit_contiguous),
    )
    each = (
        f"{r.blocks_per_request:,} blocks"
        if r.paged_bytes_per_request == r.blocks_per_request * r.block_bytes
        else _size(r.paged_bytes_per_request)
    )  # sliding layers hold fewer blocks than the full ones
    row(f"  paged: {r.num_blocks:,} blocks // {each} per request", _requests(r.fit_paged))
    row(
        f"  vLLM's 'Maximum concurrency for {r.max_model_len:,} tokens per request'",
        f"{r.vllm_max_concurrency:.2f}x",
    )
    if r.fit_contiguous == 0:
        row(
            f"  ! one request at {r.max_model_len:,} tokens does not fit; longest that fits",
            f"{r.max_model_len_that_fits:,}",
        )
    if r.concurrency is not None:
        verdict = {True: "fits", False: "does NOT fit"}
        row(
            f"  target of {r.concurrency:,} concurrent requests",
            f"contiguous {verdict[r.fits_contiguous]}, paged {verdict[r.fits_paged]}",
        )
    if r.prefix is not None:
        p = r.prefix
        row(f"Shared prefix: {p.prefix_tokens:,} tokens x {p.requests:,} requests")
        row(f"  separate copies ({p.requests:,} x {p.prefix_tokens:,} tokens)", _size(p.bytes_separate))
        row(
            f"  one shared copy of floor({p.prefix_tokens:,} / {p.block_size}) = {p.blocks_shared:,} full blocks"
            " + each request's tail",
            _size(p.bytes_shared),
        )
        row(f"  saved ({p.blocks_saved:,} blocks)", _size(p.bytes_saved))
    width = max(len(label) for label, value in rows if value) + 2
    return "\n".join(f"{label:<{width}}= {value}" if value else label for label, value in rows)
