"""Per-layer paged KV cache storage: `[num_blocks, block_size, num_kv_heads, head_dim]`.

Scales by format (see the quantization module): none for float formats; fp8 has `[1]`
float32 scales per tensor; int8 has float16 scales `[num_blocks, block_size, num_kv_heads]`,
one per stored (token, KV head), which live and move with their block.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_engine.attention.quantization import (
    INT8_SCALE_DTYPE,
    KVQuant,
    fp8_scale_for,
    kv_quant_of,
    kv_storage_dtype,
)


@dataclass(slots=True)
class LayerKVCache:
    """K and V pages of one layer. Block 0 is the null block: never written, only padding.

    `k_scale`/`v_scale` are None for unquantized caches; quantized formats add them and
    readers dequantize to fp32 right after loading. `fp8_calibrated` records whether the
    per-tensor fp8 scales were set by a first write (a host flag, so steady-state writes
    need no device sync to know it).
    """

    key: torch.Tensor
    value: torch.Tensor
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None
    fp8_calibrated: bool = False

    @property
    def block_size(self) -> int:
        return self.key.shape[1]

    @property
    def quant(self) -> KVQuant:
        return kv_quant_of(self.key.dtype)


def allocate_kv_caches(
    num_layers: int,
    num_blocks: int,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    model_dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    kv_cache_dtype: str = "auto",
) -> list[LayerKVCache]:
    """Zeroed caches for every layer. `model_dtype` (a torch dtype or its name) is what `auto` stores.

    Zeroing matters: the null block is read as padding by the kernels and must hold finite
    values.
    """
    storage = kv_storage_dtype(kv_cache_dtype, model_dtype)
    quant = kv_quant_of(storage)
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    caches = []
    for _ in range(num_layers):
        cache = LayerKVCache(
            torch.zeros(shape, dtype=storage, device=device), torch.zeros(shape, dtype=storage, device=device)
        )
        if quant == KVQuant.FP8_PER_TENSOR:
            cache.k_scale = torch.ones(1, dtype=torch.float32, device=device)
            cache.v_scale = torch.ones(1, dtype=torch.float32, device=device)
        elif quant == KVQuant.INT8_PER_TOKEN_HEAD:
            cache.k_scale = torch.zeros(shape[:3], dtype=INT8_SCALE_DTYPE, device=device)
            cache.v_scale = torch.zeros(shape[:3], dtype=INT8_SCALE_DTYPE, device=device)
        caches.append(cache)
    return caches


def kv_cache_bytes_per_block(
    num_layers: int,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    kv_cache_dtype: str,
    model_dtype: torch.dtype | str,
) -> int:
    """Bytes one block costs across all layers, K and V, per-block scales included.

    Exactly `sum(t.nbytes for every per-block tensor) / num_blocks` of `allocate_kv_caches`.
    fp8's per-tensor scales (8 bytes per layer, whatever the pool size) are not per block.
    A pool of `budget // kv_cache_bytes_per_block(...)` blocks fits in `budget` bytes.
    """
    storage = kv_storage_dtype(kv_cache_dtype, model_dtype)
    token_heads = block_size * num_kv_heads
    per_tensor = token_heads * head_dim * storage.itemsize
    if kv_quant_of(storage) == KVQuant.INT8_PER_TOKEN_HEAD:
        per_tensor += token_heads * INT8_SCALE_DTYPE.itemsize
    return 2 * num_layers * per_tensor


def copy_blocks(caches: list[LayerKVCache], pairs: list[tuple[int, int]]) -> None:
    """Copy-on-write: duplicate whole blocks (src -> dst) in every layer, per-block scales included."""
    if not pairs:
        return
    src = torch.tensor([s for s, _ in pairs], dtype=torch.long, device=caches[0].key.device)
    dst = torch.tensor([d for _, d in pairs], dtype=torch.long, device=caches[0].key.device)
    for cache in caches:
        per_block = [cache.key, cache.value]
        if cache.quant == KVQuant.INT8_PER_TOKEN_HEAD:
            per_block += [cache.k_scale, cache.v_scale]
        for t in per_block:
            t[dst] = t[src]


def calibrate_fp8_scales(
    cache: LayerKVCache,
    key: torch.Tensor,
    value: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Set an fp8 cache's per-tensor scales from its first write; later writes leave them alone.

    Padding rows (slot -1) are excluded with a mask rather than boolean indexing, which
    would force a device-to-host sync. The host-side flag keeps the steady state free of
    the amax reduction.
    """
    if cache.fp8_calibrated:
        return
    assert cache.k_scale is not None and cache.v_scale is not None
    valid = (slot_mapping >= 0)[:, None, None]
    for x, scale in ((key, cache.k_scale), (value, cache.v_scale)):
        amax = torch.where(valid, x.float().abs(), 0.0).amax()
        scale.copy_(fp8_scale_for(amax).reshape(1))
    cache.fp8_calibrated = True
