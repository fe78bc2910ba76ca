"""Per-layer paged KV cache storage: `[num_blocks, block_size, num_kv_heads, head_dim]`."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(slots=True)
class LayerKVCache:
    """K and V pages of one layer. Block 0 is the null block: never written, only padding.

    `k_scale`/`v_scale` are None for unquantized caches; quantized formats add them
    (see the quantization module) and readers dequantize to fp32 right after loading.
    """

    key: torch.Tensor
    value: torch.Tensor
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None

    @property
    def block_size(self) -> int:
        return self.key.shape[1]


def allocate_kv_caches(
    num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
    dtype: torch.dtype, device: str | torch.device = "cpu",
) -> list[LayerKVCache]:
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    return [
        LayerKVCache(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device))
        for _ in range(num_layers)
    ]


def copy_blocks(caches: list[LayerKVCache], pairs: list[tuple[int, int]]) -> None:
    """Copy-on-write: duplicate whole blocks (src -> dst) in every layer, scales included."""
    if not pairs:
        return
    src = torch.tensor([s for s, _ in pairs], dtype=torch.long, device=caches[0].key.device)
    dst = torch.tensor([d for _, d in pairs], dtype=torch.long, device=caches[0].key.device)
    for cache in caches:
        for t in (cache.key, cache.value, cache.k_scale, cache.v_scale):
            if t is not None and t.dim() >= 1 and t.shape[0] == cache.key.shape[0]:
                t[dst] = t[src]
