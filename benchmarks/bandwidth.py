"""Bytes a decode step moves, and what this machine can move: the distance to the memory limit.

A decode step of a small model is memory-bound at low batch: every weight is read once per
step, and each sequence's KV context once per layer. `step_bytes` counts those reads (what
any engine must move; temporaries and writes are left out, so the implied bandwidth is a
lower bound on what the step really moved). `copy_bandwidth` measures one thread streaming
a buffer far larger than the caches, as `torch` reads (a sum) and as a copy (read + write).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

BUFFER_BYTES = 512 << 20


@dataclass(frozen=True, slots=True)
class Bandwidth:
    read_gb_s: float
    copy_gb_s: float  # bytes read + bytes written, per second


def copy_bandwidth(repeats: int = 5) -> Bandwidth:
    """Best of `repeats` on one thread (other work on a shared machine only slows a pass down)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        src = torch.ones(BUFFER_BYTES // 4, dtype=torch.float32)
        dst = torch.empty_like(src)
        best_read = best_copy = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            src.sum()
            t1 = time.perf_counter()
            dst.copy_(src)
            t2 = time.perf_counter()
            best_read, best_copy = min(best_read, t1 - t0), min(best_copy, t2 - t1)
        return Bandwidth(BUFFER_BYTES / best_read / 1e9, 2 * BUFFER_BYTES / best_copy / 1e9)
    finally:
        torch.set_num_threads(threads)


def module_bytes(model) -> int:
    """Bytes of every parameter and buffer a forward pass reads (int8 weights, scales, norms),
    and of weights packed for a kernel (fp16's fbgemm layout), which modules state as
    `packed_bytes`."""
    tensors = list(model.parameters()) + [b for name, b in model.named_buffers() if name != "inv_freq"]
    packed = sum(getattr(m, "packed_bytes", 0) for m in model.modules())
    return sum(t.numel() * t.element_size() for t in tensors) + packed


def weight_bytes_per_step(model, batch: int) -> int:
    """What one decode step reads of the weights: all of them except the embedding table, of
    which only `batch` rows are looked up. With tied embeddings the table is also the logits
    head, which is read whole."""
    embed = model.model.embed_tokens.weight
    table = embed.numel() * embed.element_size()
    rows = batch * embed.shape[1] * embed.element_size()
    # A tied table is also the head, read whole, unless a weight format holds the head apart.
    head = table if model.config.tie_word_embeddings and model.logits_head is None else 0
    return module_bytes(model) - table + rows + head


def kv_bytes_per_step(
    num_layers: int, kv_heads: int, head_dim: int, element: int, contexts: list[int]
) -> int:
    """K and V of every context position, every layer, read once by the step's attention."""
    return 2 * num_layers * kv_heads * head_dim * element * sum(contexts)


def gguf_weight_bytes(path: str, batch: int) -> int:
    """The same count for a GGUF file's tensors as stored (llama.cpp reads them quantized)."""
    import gguf

    reader = gguf.GGUFReader(path, "r")
    total, table, row = 0, 0, 0
    names = {t.name for t in reader.tensors}
    for t in reader.tensors:
        total += int(t.n_bytes)
        if t.name == "token_embd.weight":
            table, row = int(t.n_bytes), int(t.n_bytes) // int(t.shape[1])
    head = table if "output.weight" not in names else 0
    return total - table + batch * row + head
