"""Step time of one scheduler step on a named GPU: a roofline with stated efficiencies.

    memory  = (weight bytes read + KV bytes read) / (bandwidth x bandwidth efficiency)
    compute = (2 x active params x new tokens + attention FLOPs) / (peak x compute efficiency)
    step    = max(memory, compute) + fixed per-step overhead (+ TP all-reduce latency)

Everything is per GPU: weights, KV heads and attention heads are split over `tp` ranks. The
model is deliberately simple: it ranks configurations and reproduces the decode/prefill
regimes (decode reads every weight once per step, so it is memory-bound at small batch;
long prefills are compute-bound); it is not a kernel-level predictor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from reference_engine.catalogue import (
    SERVING_OVERHEAD_BYTES,
    GPUSpec,
    ModelSpec,
    kv_dtype_bytes,
    weight_dtype_bytes,
)
from reference_engine.config import ConfigError

GiB = 1 << 30


class StepTimeModel(Protocol):
    """What the simulator's executor needs of a cost model: seconds for one step of
    (new tokens, context length after the step) per sequence. `CostModel` is one; a model
    fitted to a real run's step times (the advisor's calibration) is another. A model whose
    speed drifts over time may also define `step_time_at(batch, t)`, the time of a step that
    starts at `t` on the executor's clock (a replay's virtual seconds); the executor then
    uses that."""

    def step_time(self, batch: Sequence[tuple[int, int]]) -> float: ...


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Shares of the datasheet peaks a serving engine sustains, and fixed costs.

    bandwidth 0.8 and compute 0.6: alibaba/InferSim's hardware/gpu.py models GPUs with
    mem_bw x 0.8 and a default MFU of 0.35-0.6; decode kernels stream HBM near 80%, large
    GEMMs reach 60-70% of dense peak. step_overhead 0.5 ms: scheduling, sampling and launch
    gaps that CUDA graphs do not hide (Llama-3.1-8B decodes in ~6.5 ms on an H100 where
    the weight read alone takes 6.0 ms at 80%). allreduce 10 us: one small NVLink all-reduce;
    tensor parallelism needs two per layer per step.
    """

    bandwidth: float = 0.8
    compute: float = 0.6
    step_overhead_s: float = 0.5e-3
    allreduce_s: float = 10e-6

    def __post_init__(self) -> None:
        for name in ("bandwidth", "compute"):
            if not 0 < getattr(self, name) <= 1:
                raise ConfigError(f"{name} efficiency must be in (0, 1], got {getattr(self, name)}")
        if self.step_overhead_s < 0 or self.allreduce_s < 0:
            raise ConfigError("fixed step costs must be >= 0 seconds")


@dataclass(frozen=True, slots=True)
class StepCost:
    """One step's breakdown; `total_s` = max(memory_s, compute_s) + overhead_s."""

    memory_s: float
    compute_s: float
    overhead_s: float
    bytes_read: float
    flops: float

    @property
    def total_s(self) -> float:
        return max(self.memory_s, self.compute_s) + self.overhead_s

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s > self.memory_s else "memory"


@dataclass(frozen=True, slots=True)
class CostModel:
    """A model served on `tp` GPUs of one kind. Batches are sequences of
    (num_new_tokens, context_len_after_step): tokens computed this step and the sequence's
    length once they are in the cache."""

    model: ModelSpec
    gpu: GPUSpec
    tp: int = 1
    weight_dtype: str = "auto"
    kv_dtype: str = "auto"
    efficiency: Efficiency = field(default_factory=Efficiency)

    def __post_init__(self) -> None:
        try:
            self.model.check_tensor_parallel(self.tp)
            kv_dtype_bytes(self.kv_dtype)
            self.model.weight_bytes(self.weight_dtype)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def _weight_bytes_read(self, tokens: int) -> float:
        """All dense weights, plus the routed experts this many tokens are expected to touch:
        each token picks k of E experts, so a layer touches 1 - (1 - k/E)^tokens of them."""
        m = self.model
        total = m.weight_bytes(self.weight_dtype)
        if not m.is_moe:
            return total / self.tp
        dtype = m.native_weight_dtype if self.weight_dtype == "auto" else self.weight_dtype
        experts = m.expert_params * weight_dtype_bytes(dtype)
        touched = 1 - (1 - m.experts_per_token / m.num_experts) ** tokens
        return (total - experts + experts * touched) / self.tp

    def _attention_flops(self, new: int, context: int) -> float:
        """4 x layers x heads x head_dim x new tokens x attended length (QK^T and PV, 2 FLOPs
        per MAC). New tokens attend causally, so on average to context - (new - 1) / 2;
        sliding layers see at most their window."""
        m = self.model
        span = context - (new - 1) / 2
        window_span = min(span, m.sliding_window) if m.sliding_window else span
        attended = m.num_full_layers * span + m.num_sliding_layers * window_span
        return 4 * attended * m.num_heads * m.head_dim * new

    def step_cost(self, batch: Sequence[tuple[int, int]]) -> StepCost:
        m, eff = self.model, self.efficiency
        if not batch:
            return StepCost(0.0, 0.0, 0.0, 0.0, 0.0)
        kvb = kv_dtype_bytes(self.kv_dtype)
        tokens, kv_read, attn = 0, 0, 0.0
        for new, context in batch:
            if new < 1 or context < new:
                raise ConfigError(f"each sequence needs 1 <= new tokens <= context, got ({new}, {context})")
            tokens += new
            kv_read += m.kv_bytes_for_tokens(context, kvb, self.tp)
            attn += self._attention_flops(new, context)
        dtype = m.native_weight_dtype if self.weight_dtype == "auto" else self.weight_dtype
        flops = (2 * m.active_params * tokens + attn) / self.tp
        bytes_read = self._weight_bytes_read(tokens) + kv_read
        overhead = eff.step_overhead_s + (2 * m.num_layers * eff.allreduce_s if self.tp > 1 else 0.0)
        return StepCost(
            memory_s=bytes_read / (self.gpu.bandwidth_bytes_per_s * eff.bandwidth),
            compute_s=flops / (self.gpu.peak_flops(dtype) * eff.compute),
            overhead_s=overhead,
            bytes_read=bytes_read,
            flops=flops,
        )

    def step_time(self, batch: Sequence[tuple[int, int]]) -> float:
        """Seconds for one step; 0.0 for an empty batch (no step runs)."""
        return self.step_cost(batch).total_s


def step_time(
    model: ModelSpec,
    gpu: GPUSpec,
    batch: Sequence[tuple[int, int]],
    *,
    tp: int = 1,
    weight_dtype: str = "auto",
    kv_dtype: str = "auto",
    efficiency: Efficiency | None = None,
) -> float:
    return CostModel(model, gpu, tp, weight_dtype, kv_dtype, efficiency or Efficiency()).step_time(batch)


def simulated_num_blocks(
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int = 1,
    utilisation: float = 0.9,
    kv_dtype: str = "auto",
    block_size: int = 16,
    max_model_len: int | None = None,
    *,
    weight_dtype: str = "auto",
    overhead_bytes: int = SERVING_OVERHEAD_BYTES,
) -> int:
    """KV blocks per GPU the simulated engine gets, counted like vLLM's num_gpu_blocks (the
    null block included): (memory x utilisation - weights / tp - overhead) // block bytes.

    The same arithmetic as harness.advisor.sizing (which reference_engine may not import;
    tests hold the two equal). Weights never silently change dtype: a 70B in bf16 (141 GB)
    on one 80 GB H100 raises ConfigError asking for tensor parallelism or fp8 weights, as
    vLLM would fail. With max_model_len, one request of that length must fit, as vLLM checks.
    """
    if not 0 < utilisation <= 1:
        raise ConfigError(f"gpu_memory_utilization must be in (0, 1], got {utilisation}")
    if block_size < 1:
        raise ConfigError(f"block_size must be positive, got {block_size}")
    try:
        model.check_tensor_parallel(tp)
        weights = -(-model.weight_bytes(weight_dtype) // tp)
        kv_bytes = kv_dtype_bytes(kv_dtype)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    budget = int(gpu.memory_bytes * utilisation) - weights - overhead_bytes
    if budget <= 0:
        dtype = model.native_weight_dtype if weight_dtype == "auto" else weight_dtype
        raise ConfigError(
            f"{model.name} ({dtype} weights: {weights / GiB:.1f} GiB per GPU at tensor_parallel_size={tp}) "
            f"leaves no KV cache on {gpu.name} ({gpu.memory_bytes / GiB:.1f} GiB x {utilisation}); "
            f"raise tensor_parallel_size or use weight_dtype='fp8'"
        )
    per_block = block_size * model.num_layers * model.kv_bytes_per_token_per_layer(kv_bytes, tp)
    blocks = budget // per_block
    if (
        max_model_len is not None
        and model.kv_bytes_for_tokens(max_model_len, kv_bytes, tp) > blocks * per_block
    ):
        raise ConfigError(
            f"one request at max_model_len {max_model_len:,} needs "
            f"{model.kv_bytes_for_tokens(max_model_len, kv_bytes, tp) / GiB:.2f} GiB of KV cache, more than "
            f"the {blocks * per_block / GiB:.2f} GiB available; lower max_model_len or raise "
            "gpu_memory_utilization"
        )
    return blocks
