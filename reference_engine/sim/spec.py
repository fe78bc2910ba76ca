"""The deployment a simulation models (`SimSpec`), with the flags that set it.

Stdlib only: the harness builds and records a SimSpec without importing the engine core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from reference_engine.arg_field import arg_field

# auto: the catalogue model's checkpoint dtype.
SimWeightDType = Literal["auto", "bf16", "fp16", "fp8", "int8", "int4"]


@dataclass(frozen=True, slots=True)
class SimSpec:
    """The deployment being simulated. Scheduler knobs (block size, max_num_seqs, token
    budget, prefix caching, allocator, max_model_len, KV dtype) come from the EngineConfig."""

    model: str = arg_field(
        "llama-3.1-70b", "catalogue model to simulate (default: %(default)s)", flag="--sim-model"
    )
    gpu: str = arg_field("h100-80gb", "catalogue GPU to simulate (default: %(default)s)", flag="--sim-gpu")
    tensor_parallel_size: int = arg_field(1, "GPUs the simulated model is split over (default: %(default)s)")
    gpu_memory_utilization: float = arg_field(
        0.9, "share of GPU memory for weights plus KV cache, as in vLLM (default: %(default)s)"
    )
    weight_dtype: SimWeightDType = arg_field(
        "auto", "weight dtype of the simulated model (auto: its checkpoint's)", flag="--sim-weight-dtype"
    )
