"""Choosing and validating the attention backend: `torch` (the oracle, CPU) or `triton` (GPU).

Both backends have one interface, `write_kv` then `attention`, over the same cache layout
and metadata, so the model never knows which one runs. `auto` means triton on CUDA and
torch elsewhere. `validate_attention_config` is called by the engine before it accepts a
request, so an impossible combination fails at start-up with a message, not mid-request
with a compiler error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

import torch

from reference_engine.attention.kv_cache import LayerKVCache
from reference_engine.attention.metadata import AttentionMetadata
from reference_engine.config import ATTENTION_BACKENDS, ConfigError, check_kv_cache_dtype

# Powers of two (as EngineConfig requires; page/slot splits then compile to shifts and
# masks) within the range the kernel tests cover (8, 16 and 64 are exercised).
TRITON_BLOCK_SIZES = (8, 16, 32, 64, 128)
# Head sizes of the model families served (padded to a power of two inside the kernels;
# >= 16 because head_dim is the K dimension of the Q @ K^T `tl.dot`).
TRITON_HEAD_DIMS = (16, 32, 64, 80, 96, 128, 256)
# e4m3 conversions exist in hardware from Ada / Hopper on; Triton refuses them below.
FP8_MIN_CUDA_CAPABILITY = (8, 9)


class AttentionBackend(Protocol):
    name: str

    def write_kv(
        self, key: torch.Tensor, value: torch.Tensor, cache: LayerKVCache, slot_mapping: torch.Tensor
    ) -> None: ...

    def attention(
        self, query: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata, scale: float
    ) -> torch.Tensor: ...


@dataclass(frozen=True, slots=True)
class TorchAttentionBackend:
    name: str = "torch"

    def write_kv(
        self, key: torch.Tensor, value: torch.Tensor, cache: LayerKVCache, slot_mapping: torch.Tensor
    ) -> None:
        from reference_engine.attention.torch_backend import write_kv

        write_kv(key, value, cache, slot_mapping)

    def attention(
        self, query: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata, scale: float
    ) -> torch.Tensor:
        from reference_engine.attention.torch_backend import paged_attention, paged_decode_attention

        if meta.max_query_len == 1:
            return paged_decode_attention(query, cache, meta, scale)
        return paged_attention(query, cache, meta, scale)


@dataclass(frozen=True, slots=True)
class TritonAttentionBackend:
    """Decode-only batches (every query length 1) go to the split-KV decode kernel, which
    parallelizes over the context; anything else goes to the varlen prefill kernel."""

    name: str = "triton"

    def write_kv(
        self, key: torch.Tensor, value: torch.Tensor, cache: LayerKVCache, slot_mapping: torch.Tensor
    ) -> None:
        from reference_engine.attention.triton_write import triton_write_kv

        triton_write_kv(key, value, cache, slot_mapping)

    def attention(
        self, query: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata, scale: float
    ) -> torch.Tensor:
        if meta.max_query_len == 1:
            from reference_engine.attention.triton_decode import paged_decode

            return paged_decode(query, cache, meta, scale)
        from reference_engine.attention.triton_prefill import paged_prefill

        return paged_prefill(query, cache, meta, scale)


def resolve_backend_name(name: str, device: str | torch.device) -> str:
    if name not in ATTENTION_BACKENDS:
        raise ConfigError(f"attention_backend must be one of {', '.join(ATTENTION_BACKENDS)}, got {name!r}")
    if name == "auto":
        return "triton" if torch.device(device).type == "cuda" else "torch"
    return name


def get_attention_backend(name: str, device: str | torch.device) -> AttentionBackend:
    """The backend for a setting (`auto` | `torch` | `triton`) on `device`."""
    if resolve_backend_name(name, device) == "triton":
        return TritonAttentionBackend()
    return TorchAttentionBackend()


def validate_attention_config(
    backend: str | AttentionBackend,
    block_size: int,
    head_dim: int,
    kv_cache_dtype: str,
    device: str | torch.device,
) -> None:
    """Raise ConfigError unless `backend` (a setting or a backend object) can serve this cache
    geometry and format on `device`."""
    check_kv_cache_dtype(kv_cache_dtype)
    device = torch.device(device)
    name = resolve_backend_name(backend if isinstance(backend, str) else backend.name, device)
    if block_size < 1 or block_size & (block_size - 1):
        raise ConfigError(f"block_size must be a positive power of two, got {block_size}")
    if head_dim < 1:
        raise ConfigError(f"head_dim must be positive, got {head_dim}")
    if name == "torch":
        return
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ConfigError(
            f"the triton attention backend needs a CUDA device (got {device}); "
            "use attention_backend='torch' (or TRITON_INTERPRET=1 to test kernels on CPU)"
        )
    if block_size not in TRITON_BLOCK_SIZES:
        raise ConfigError(
            f"the triton attention backend supports block sizes {TRITON_BLOCK_SIZES}, got {block_size}"
        )
    if head_dim not in TRITON_HEAD_DIMS:
        raise ConfigError(
            f"the triton attention backend supports head sizes {TRITON_HEAD_DIMS}, got {head_dim}; "
            "use attention_backend='torch'"
        )
    if kv_cache_dtype == "fp8" and device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if capability < FP8_MIN_CUDA_CAPABILITY:
            raise ConfigError(
                "kv_cache_dtype='fp8' with the triton backend needs CUDA compute capability >= 8.9 "
                f"(Ada/Hopper); this GPU has {capability[0]}.{capability[1]}. Use kv_cache_dtype='int8' "
                "instead"
            )
