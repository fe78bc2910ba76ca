"""`kvscope size`'s output: the sizing plan (`sizing.plan`) as the worked arithmetic a person
can follow, one step a line, or as JSON for machines."""

from __future__ import annotations

import dataclasses
from typing import Any


def plan_json(result: Any, model: Any) -> dict[str, Any]:
    """`kvscope size --json`: the plan's fields, the prefix savings and the attention kind."""
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
        f"{r.model} on {r.gpu}, tp={r.tp}, KV dtype {r.kv_dtype}, weights {r.weight_dtype}, "
        f"block {r.block_size} tokens"
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
            f"  one shared copy of floor({p.prefix_tokens:,} / {p.block_size}) = "
            f"{p.blocks_shared:,} full blocks"
            " + each request's tail",
            _size(p.bytes_shared),
        )
        row(f"  saved ({p.blocks_saved:,} blocks)", _size(p.bytes_saved))
    width = max(len(label) for label, value in rows if value) + 2
    return "\n".join(f"{label:<{width}}= {value}" if value else label for label, value in rows)
