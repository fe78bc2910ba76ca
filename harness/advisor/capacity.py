"""KV pool sizes of a deployment and of its changed versions, and the cheapest way to more.

All arithmetic is `sizing`'s (vLLM's: memory x utilisation - weights / tp - overhead, in
whole blocks). A changed pool is the run's *observed* pool scaled by the arithmetic's
ratio (changed / as run), so an engine whose real profiling gave a different count than
the formula (a vLLM target, an explicit --num-blocks) keeps its own baseline and only the
change is modelled. Without a catalogue GPU (the bundled CPU engine) only the element-size
ratio applies (an fp8 cache holds bytes(dtype) / 1 as many tokens in the same memory).

Options for "more memory", each an explicit deployment with its GPU count:
- tensor parallelism: the same GPU, tp x 2, x 4 ... up to 8 (one node), where the heads divide;
- a larger catalogue GPU at the same tp;
- replicas of the deployment as it is: R = ceil(demand / pool), each serving 1 / R of the load.
The cheapest is the one with the least GPU memory in total (GPU count breaks ties).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.advisor import sizing
from harness.advisor.deployment import Deployment
from reference_engine.catalogue import GPUS, get_gpu, get_model, kv_dtype_bytes

MAX_TP = 8
MEMORY_UTILIZATION_TARGET = 0.9  # vLLM's released default


@dataclass(frozen=True, slots=True)
class MemoryOption:
    kind: str  # "tensor_parallel" | "larger_gpu" | "replicas" | "num_blocks"
    gpu: str | None
    tp: int
    replicas: int
    num_blocks: int  # per replica, null block included
    gpus: int  # total
    total_memory_gib: float | None

    @property
    def label(self) -> str:
        if self.kind == "num_blocks":
            return f"a KV pool of {self.num_blocks:,} blocks"
        where = f"{self.tp} x {self.gpu}" if self.tp > 1 else f"one {self.gpu}"
        return f"{self.replicas} replicas of {where}" if self.replicas > 1 else where


def arithmetic_blocks(
    dep: Deployment,
    *,
    kv_dtype: str | None = None,
    gpu: str | None = None,
    tp: int | None = None,
    utilisation: float | None = None,
) -> int | None:
    """sizing's block count for the deployment with the given fields changed (None when the
    deployment has no catalogue model and GPU, or the weights leave no room)."""
    if not dep.gpu_sized:
        return None
    model, g = get_model(dep.model or ""), get_gpu(gpu or dep.gpu or "")
    try:
        budget = sizing.gpu_kv_budget_bytes(
            model,
            g,
            tp=tp or dep.tp,
            weight_dtype=dep.weight_dtype,
            utilisation=utilisation or dep.gpu_memory_utilization or sizing.DEFAULT_GPU_MEMORY_UTILIZATION,
        )
        per_block = sizing.block_bytes(model, kv_dtype or dep.kv_dtype, tp or dep.tp, dep.engine.block_size)
    except ValueError:
        return None
    return sizing.num_blocks(budget, per_block)


def base_blocks(dep: Deployment) -> int | None:
    """The pool the run had: observed, else the arithmetic."""
    return dep.num_blocks or arithmetic_blocks(dep)


def changed_blocks(dep: Deployment, **change: object) -> int | None:
    """The observed pool scaled by arithmetic(changed) / arithmetic(as run)."""
    base = base_blocks(dep)
    if base is None:
        return None
    if dep.gpu_sized:
        before, after = arithmetic_blocks(dep), arithmetic_blocks(dep, **change)  # type: ignore[arg-type]
        if not before or after is None:
            return None
        return max(2, round(base * after / before)) if dep.num_blocks else after
    kv_dtype = change.get("kv_dtype")
    if kv_dtype and set(change) == {"kv_dtype"}:  # CPU engine: same bytes, smaller elements
        return max(2, (base - 1) * dep.kv_element_bytes // kv_dtype_bytes(str(kv_dtype)) + 1)
    return None


def kv_bytes_per_token(dep: Deployment, kv_dtype: str | None = None) -> int | None:
    """Per GPU, every layer (None without a catalogue model)."""
    if dep.model is None:
        return None
    return sizing.kv_bytes_per_token_per_gpu(get_model(dep.model), kv_dtype or dep.kv_dtype, dep.tp)


def memory_options(dep: Deployment, demand_blocks: int) -> list[MemoryOption]:
    """Every option whose pool holds `demand_blocks` (per replica share for replicas),
    cheapest first. Without a GPU: one option, a pool of demand blocks (+1 %, the watermark)."""
    base = base_blocks(dep)
    needed = math.ceil(demand_blocks * 1.01) + 1
    if base is None:
        return []
    if not dep.gpu_sized:
        return [MemoryOption("num_blocks", None, 1, 1, needed, 1, None)]
    current = get_gpu(dep.gpu or "")
    model = get_model(dep.model or "")
    options: list[MemoryOption] = []
    tp = dep.tp * 2
    while tp <= MAX_TP:
        try:
            model.check_tensor_parallel(tp)
        except ValueError:
            tp *= 2
            continue
        blocks = changed_blocks(dep, tp=tp)
        if blocks is not None and blocks >= needed:
            options.append(
                MemoryOption(
                    "tensor_parallel", current.name, tp, 1, blocks, tp, _gib(current.memory_bytes * tp)
                )
            )
            break  # larger tp only costs more
        tp *= 2
    for gpu in sorted(GPUS.values(), key=lambda g: g.memory_bytes):
        if gpu.memory_bytes <= current.memory_bytes:
            continue
        blocks = changed_blocks(dep, gpu=gpu.name)
        if blocks is not None and blocks >= needed:
            options.append(
                MemoryOption(
                    "larger_gpu", gpu.name, dep.tp, 1, blocks, dep.tp, _gib(gpu.memory_bytes * dep.tp)
                )
            )
            break  # the smallest larger GPU that fits
    replicas = max(2, math.ceil(needed / base))
    options.append(
        MemoryOption(
            "replicas",
            current.name,
            dep.tp,
            replicas,
            base,
            replicas * dep.tp,
            _gib(current.memory_bytes * dep.tp * replicas),
        )
    )
    return sorted(options, key=lambda o: (o.total_memory_gib or 0, o.gpus))


def _gib(n: float) -> float:
    return round(n / (1 << 30), 1)
