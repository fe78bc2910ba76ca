"""KV-cache sizing arithmetic: bytes per token, the memory budget, blocks, concurrency, sharing.

Pure functions over catalogue entries, following vLLM V1's accounting so a result can be
checked against its start-up log ("Available KV cache memory", "GPU KV cache size: N tokens"):

    budget     = GPU memory x utilisation - weights / tp - overhead   (per GPU)
    block      = block_size x KV bytes per token on one GPU           (every layer)
    num_blocks = budget // block       tokens = num_blocks x block_size

Per-GPU figures assume tensor parallelism: GQA KV heads are split across ranks (replicated
once tp > KV heads); the MLA latent is kept whole on every rank. Sliding-window layers hold
min(window, context) tokens per request, so a request's bytes are not proportional to its
context; the pool itself is counted in full-attention blocks, as vLLM logs it for uniform
models (hybrid models get more tokens than that figure suggests).
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_engine.catalogue import (
    SERVING_OVERHEAD_BYTES,
    GPUSpec,
    ModelSpec,
    kv_dtype_bytes,
)

GiB = 1 << 30
DEFAULT_BLOCK_SIZE = 16  # vLLM's CacheConfig default
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # released vLLM default (0.92 on newest main)
DEFAULT_OVERHEAD_BYTES = SERVING_OVERHEAD_BYTES  # reasoning in reference_engine.catalogue


class SizingError(ValueError):
    """Inputs that cannot describe a working deployment (weights larger than the GPU, ...)."""


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str = "auto") -> int:
    """Full-attention bytes per token for the whole model on one GPU, every layer counted.

    GQA: 2 (K and V) x layers x KV heads x head_dim x bytes; MLA: layers x (kv_lora_rank +
    qk_rope_head_dim) x bytes. Llama 3.1 70B at 16 bits: 327,680.
    """
    return model.num_layers * model.kv_bytes_per_token_per_layer(kv_dtype_bytes(kv_dtype))


def kv_bytes_per_token_per_gpu(model: ModelSpec, kv_dtype: str = "auto", tp: int = 1) -> int:
    """The full-attention figure for one tensor-parallel rank (what one block's bytes scale with)."""
    _check_tp(model, tp)
    return model.num_layers * model.kv_bytes_per_token_per_layer(kv_dtype_bytes(kv_dtype), tp)


def kv_bytes_for_context(model: ModelSpec, context_tokens: int, kv_dtype: str = "auto", tp: int = 1) -> int:
    """Bytes one request of `context_tokens` holds on one GPU (sliding layers capped at the window)."""
    _check_tp(model, tp)
    _positive("context tokens", context_tokens)
    return model.kv_bytes_for_tokens(context_tokens, kv_dtype_bytes(kv_dtype), tp)


def kv_bytes_per_token_at(
    model: ModelSpec, context_tokens: int, kv_dtype: str = "auto", tp: int = 1
) -> float:
    """Average bytes per token at context C: equals the full figure unless layers slide."""
    return kv_bytes_for_context(model, context_tokens, kv_dtype, tp) / context_tokens


def weight_bytes_per_gpu(model: ModelSpec, weight_dtype: str = "auto", tp: int = 1) -> int:
    """Weights are sharded evenly across tensor-parallel ranks (embeddings too, vocab-parallel)."""
    _check_tp(model, tp)
    return -(-model.weight_bytes(weight_dtype) // tp)


def kv_budget_bytes(
    gpu_memory_bytes: int,
    weight_bytes_per_gpu: int,
    *,
    utilisation: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    overhead_bytes: int = DEFAULT_OVERHEAD_BYTES,
) -> int:
    """Bytes left for the KV cache on one GPU: memory x utilisation - weights - overhead.

    Raises SizingError when utilisation is outside (0, 1] or nothing is left for the cache,
    naming what took the memory, because that is the first thing an operator must change.
    """
    if not 0 < utilisation <= 1:
        raise SizingError(f"GPU memory utilisation must be in (0, 1], got {utilisation}")
    if overhead_bytes < 0:
        raise SizingError(f"overhead must be >= 0 bytes, got {overhead_bytes}")
    usable = int(gpu_memory_bytes * utilisation)
    budget = usable - weight_bytes_per_gpu - overhead_bytes
    if budget <= 0:
        raise SizingError(
            f"no memory left for the KV cache: weights take {weight_bytes_per_gpu / GiB:.1f} GiB "
            "and overhead "
            f"{overhead_bytes / GiB:.1f} GiB of the {usable / GiB:.1f} GiB usable per GPU "
            f"({gpu_memory_bytes / GiB:.1f} GiB x {utilisation}); raise tensor parallelism, quantize the "
            f"weights (--weight-dtype fp8) or raise --gpu-memory-utilization"
        )
    return budget


def gpu_kv_budget_bytes(
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    tp: int = 1,
    weight_dtype: str = "auto",
    utilisation: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    overhead_bytes: int = DEFAULT_OVERHEAD_BYTES,
) -> int:  # kv_budget_bytes for a catalogue model on a catalogue GPU
    weights = weight_bytes_per_gpu(model, weight_dtype, tp)
    if weights >= gpu.memory_bytes:
        raise SizingError(
            f"{model.name} weights ({weights / GiB:.1f} GiB per GPU at tp={tp}) are larger than one "
            f"{gpu.name} ({gpu.memory_bytes / GiB:.1f} GiB); "
            "raise --tensor-parallel-size or use --weight-dtype fp8"
        )
    return kv_budget_bytes(gpu.memory_bytes, weights, utilisation=utilisation, overhead_bytes=overhead_bytes)


def block_bytes(
    model: ModelSpec, kv_dtype: str = "auto", tp: int = 1, block_size: int = DEFAULT_BLOCK_SIZE
) -> int:
    """One block of `block_size` tokens across every layer on one GPU (vLLM's page x layers)."""
    _positive("block size", block_size)
    return block_size * kv_bytes_per_token_per_gpu(model, kv_dtype, tp)


def num_blocks(budget_bytes: int, block_bytes: int) -> int:
    """vLLM's get_num_blocks: whole blocks only; what is left over is never used."""
    _positive("block bytes", block_bytes)
    return max(0, budget_bytes) // block_bytes


def blocks_for_tokens(tokens: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Blocks a request of `tokens` occupies: the last one is partly empty unless tokens divide."""
    return -(-tokens // block_size)


def last_block_slack(tokens: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Empty slots in a request's last block: 0 .. block_size - 1 (paging's only waste)."""
    return blocks_for_tokens(tokens, block_size) * block_size - tokens


def paged_request_bytes(
    model: ModelSpec, tokens: int, kv_dtype: str = "auto", tp: int = 1, block_size: int = DEFAULT_BLOCK_SIZE
) -> int:
    """What a paged allocator really holds for a request: its tokens rounded up to blocks."""
    rounded = blocks_for_tokens(tokens, block_size) * block_size
    if model.sliding_window:  # the window is kept in whole blocks too
        window = blocks_for_tokens(min(tokens, model.sliding_window), block_size) * block_size
        per_layer = model.kv_bytes_per_token_per_layer(kv_dtype_bytes(kv_dtype), tp)
        return per_layer * (model.num_full_layers * rounded + model.num_sliding_layers * window)
    return kv_bytes_for_context(model, rounded, kv_dtype, tp)


def idle_share(reserved_bytes: int, used_bytes: int) -> float:
    """Share of a reservation that holds nothing: 1 - used / reserved, in [0, 1]."""
    _positive("reserved bytes", reserved_bytes)
    return max(0.0, 1.0 - used_bytes / reserved_bytes)


def max_model_len_that_fits(
    model: ModelSpec,
    budget_bytes: int,
    kv_dtype: str = "auto",
    tp: int = 1,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> int:
    """Longest request one GPU's pool can hold (vLLM's 'estimated maximum model length')."""
    lo, hi = 0, model.max_context
    while lo < hi:  # request bytes grow with length, so bisect
        mid = (lo + hi + 1) // 2
        if paged_request_bytes(model, mid, kv_dtype, tp, block_size) <= budget_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True, slots=True)
class PrefixSharing:
    """A prefix of P tokens used by R requests: R copies vs one copy of its full blocks.

    Only whole blocks are shared (the prefix cache hashes full blocks), so the shared part is
    floor(P / block_size) blocks; the partial tail is kept once per request either way.
    """

    prefix_tokens: int
    requests: int
    block_size: int
    blocks_shared: int
    bytes_separate: int
    bytes_shared: int

    @property
    def bytes_saved(self) -> int:
        return self.bytes_separate - self.bytes_shared

    @property
    def blocks_saved(self) -> int:
        return (self.requests - 1) * self.blocks_shared


def prefix_sharing(
    prefix_tokens: int, requests: int, bytes_per_token: int, block_size: int = DEFAULT_BLOCK_SIZE
) -> PrefixSharing:
    """Memory for a shared prefix: separate copies R x P x b, shared full blocks held once."""
    _positive("shared prefix tokens", prefix_tokens)
    _positive("sharing requests", requests)
    _positive("block size", block_size)
    shared_blocks = prefix_tokens // block_size
    tail = prefix_tokens - shared_blocks * block_size
    return PrefixSharing(
        prefix_tokens=prefix_tokens,
        requests=requests,
        block_size=block_size,
        blocks_shared=shared_blocks,
        bytes_separate=requests * prefix_tokens * bytes_per_token,
        bytes_shared=(shared_blocks * block_size + requests * tail) * bytes_per_token,
    )


@dataclass(frozen=True, slots=True)
class SizingPlan:
    """The worked arithmetic for one deployment, per GPU unless named otherwise.

    `reserved_*` is a contiguous allocator's up-front reservation (max_model_len tokens per
    request); `used_*` what a request of `context_tokens` really holds; `paged_*` what a paged
    allocator holds for it (used, rounded up to blocks). fits_* are None without a target.
    """

    model: str
    gpu: str
    tp: int
    kv_dtype: str
    weight_dtype: str
    block_size: int
    utilisation: float
    kv_bytes_per_token: int
    kv_bytes_per_token_per_gpu: int
    gpu_memory_bytes: int
    weight_bytes_per_gpu: int
    overhead_bytes: int
    kv_budget_bytes: int
    budget_given: bool
    block_bytes: int
    num_blocks: int
    token_capacity: int
    max_model_len: int
    context_tokens: int
    reserved_bytes_per_request: int
    used_bytes_per_request: int
    paged_bytes_per_request: int
    idle_share: float
    blocks_per_request: int
    last_block_slack: int
    max_last_block_slack: int
    fit_contiguous: int
    fit_paged: int
    vllm_max_concurrency: float
    max_model_len_that_fits: int
    concurrency: int | None
    fits_contiguous: bool | None
    fits_paged: bool | None
    prefix: PrefixSharing | None


def plan(
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    tp: int = 1,
    kv_dtype: str = "auto",
    weight_dtype: str = "auto",
    utilisation: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    overhead_bytes: int = DEFAULT_OVERHEAD_BYTES,
    kv_budget: int | None = None,
    max_model_len: int | None = None,
    context_tokens: int | None = None,
    concurrency: int | None = None,
    shared_prefix_tokens: int | None = None,
    sharing_requests: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> SizingPlan:
    """Everything `kvscope size` shows. A given kv_budget replaces the computed one, as
    vLLM's --kv-cache-memory-bytes bypasses profiling; context defaults to min(2048, L)."""
    _positive("block size", block_size)
    max_len = model.max_context if max_model_len is None else max_model_len
    _positive("max model len", max_len)
    if max_len > model.max_context:
        raise SizingError(
            f"max model len {max_len:,} exceeds {model.name}'s context of {model.max_context:,} tokens"
        )
    context = min(2048, max_len) if context_tokens is None else context_tokens
    _positive("context tokens", context)
    if context > max_len:
        raise SizingError(f"context tokens {context:,} exceed max model len {max_len:,}")
    weights = weight_bytes_per_gpu(model, weight_dtype, tp)
    if kv_budget is None:
        budget = gpu_kv_budget_bytes(
            model,
            gpu,
            tp=tp,
            weight_dtype=weight_dtype,
            utilisation=utilisation,
            overhead_bytes=overhead_bytes,
        )
    else:
        _positive("KV budget bytes", kv_budget)
        budget = kv_budget
    per_block = block_bytes(model, kv_dtype, tp, block_size)
    blocks = num_blocks(budget, per_block)
    reserved = kv_bytes_for_context(model, max_len, kv_dtype, tp)
    used = kv_bytes_for_context(model, context, kv_dtype, tp)
    paged = paged_request_bytes(model, context, kv_dtype, tp, block_size)
    prefix = None
    if shared_prefix_tokens is not None:
        requests = sharing_requests if sharing_requests is not None else concurrency
        if requests is None:
            raise SizingError("a shared prefix needs --sharing-requests (or --concurrency)")
        if shared_prefix_tokens > context:
            raise SizingError(
                f"shared prefix ({shared_prefix_tokens:,}) is longer than the context ({context:,})"
            )
        prefix = prefix_sharing(
            shared_prefix_tokens, requests, kv_bytes_per_token_per_gpu(model, kv_dtype, tp), block_size
        )
    if concurrency is not None:
        _positive("concurrency", concurrency)
    pool = blocks * per_block  # a paged allocator can only hand out whole blocks
    fit_contiguous, fit_paged = budget // reserved, pool // paged
    return SizingPlan(
        model=model.name,
        gpu=gpu.name,
        tp=tp,
        kv_dtype=kv_dtype,
        weight_dtype=weight_dtype,
        block_size=block_size,
        utilisation=utilisation,
        kv_bytes_per_token=kv_bytes_per_token(model, kv_dtype),
        kv_bytes_per_token_per_gpu=kv_bytes_per_token_per_gpu(model, kv_dtype, tp),
        gpu_memory_bytes=gpu.memory_bytes,
        weight_bytes_per_gpu=weights,
        overhead_bytes=overhead_bytes,
        kv_budget_bytes=budget,
        budget_given=kv_budget is not None,
        block_bytes=per_block,
        num_blocks=blocks,
        token_capacity=blocks * block_size,
        max_model_len=max_len,
        context_tokens=context,
        reserved_bytes_per_request=reserved,
        used_bytes_per_request=used,
        paged_bytes_per_request=paged,
        idle_share=idle_share(reserved, used),
        blocks_per_request=blocks_for_tokens(context, block_size),
        last_block_slack=last_block_slack(context, block_size),
        max_last_block_slack=block_size - 1,
        fit_contiguous=fit_contiguous,
        fit_paged=fit_paged,
        vllm_max_concurrency=pool / paged_request_bytes(model, max_len, kv_dtype, tp, block_size),
        max_model_len_that_fits=max_model_len_that_fits(model, pool, kv_dtype, tp, block_size),
        concurrency=concurrency,
        fits_contiguous=None if concurrency is None else fit_contiguous >= concurrency,
        fits_paged=None if concurrency is None else fit_paged >= concurrency,
        prefix=prefix,
    )


def _positive(what: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SizingError(f"{what} must be a positive integer, got {value!r}")


def _check_tp(model: ModelSpec, tp: int) -> None:
    try:
        model.check_tensor_parallel(tp)
    except ValueError as e:
        raise SizingError(str(e)) from None
