"""Engine configuration: one typed record, passed explicitly (no global state)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AllocatorMode = Literal["paged", "contiguous", "contiguous-oracle"]
KVCacheDType = Literal["auto", "float32", "float16", "bfloat16", "fp8", "int8"]
AttentionBackendName = Literal["auto", "torch", "triton"]


# paged: blocks on demand. contiguous: each request reserves max_model_len tokens at
# admission (the pre-paging systems the PagedAttention paper measures). contiguous-oracle:
# reserves exactly prompt + max_tokens, the paper's bound for a system that knew each
# request's true output length.
ALLOCATORS = ("paged", "contiguous", "contiguous-oracle")


class ConfigError(ValueError):
    """A configuration that cannot work; raised before any request is accepted."""


@dataclass(slots=True)
class EngineConfig:
    """How the engine is sized and scheduled. Flag names follow vLLM's.

    Exactly one of `num_blocks` and `kv_cache_memory` sizes the pool; when both are None
    the engine picks `default_num_blocks`. `num_blocks` counts the null block (block 0),
    like vLLM's `num_gpu_blocks`, so the usable pool is `num_blocks - 1`.
    """

    model: str = "smollm2-135m"
    block_size: int = 16
    num_blocks: int | None = None
    kv_cache_memory: int | None = None  # bytes for K and V across all layers
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None  # None: the model's context length
    allocator: AllocatorMode = "paged"
    enable_prefix_caching: bool = True
    watermark: float = 0.01  # share of blocks kept free when admitting, against churn
    kv_cache_dtype: KVCacheDType = "auto"
    attention_backend: AttentionBackendName = "auto"
    dtype: str = "float32"  # model compute dtype; float32 is the fast and exact path on CPU
    device: str = "cpu"
    seed: int = 0
    # torch intra-op threads. None: half the cores, at least one. Oversubscribed OpenMP
    # threads spin against the server's event loop and load generators on the same cores;
    # measured on 2 loaded cores, tiny-random ran 50x slower with 2 threads than with 1.
    num_threads: int | None = None

    default_num_blocks: int = 1024

    def validate(self) -> None:
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ConfigError(f"block_size must be a positive power of two, got {self.block_size}")
        if self.num_blocks is not None and self.kv_cache_memory is not None:
            raise ConfigError("give either num_blocks or kv_cache_memory, not both")
        if self.num_blocks is not None and self.num_blocks < 2:
            raise ConfigError(f"num_blocks must be at least 2 (one is the null block), got {self.num_blocks}")
        if self.kv_cache_memory is not None and self.kv_cache_memory <= 0:
            raise ConfigError(f"kv_cache_memory must be positive, got {self.kv_cache_memory}")
        if self.max_num_seqs < 1:
            raise ConfigError(f"max_num_seqs must be at least 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ConfigError(f"max_num_batched_tokens must be at least 1, got {self.max_num_batched_tokens}")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ConfigError(f"max_model_len must be at least 1, got {self.max_model_len}")
        if self.allocator not in ALLOCATORS:
            raise ConfigError(f"allocator must be one of {', '.join(ALLOCATORS)}, got {self.allocator!r}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ConfigError(f"num_threads must be at least 1, got {self.num_threads}")
        if not 0.0 <= self.watermark < 1.0:
            raise ConfigError(f"watermark must be in [0, 1), got {self.watermark}")
