"""What `--dtype auto` means on this machine, and the flags it is decided from.

As in vLLM, `auto` is a 16-bit dtype where the hardware computes in it natively and float32
elsewhere: on CUDA bfloat16; on a CPU bfloat16 only if it reports native bf16 matrix
instructions (AVX512_BF16 or AMX_BF16 in /proc/cpuinfo). Without them torch's bf16 matmul
runs through conversions: measured on an AVX2-only EPYC, one thread, SmolLM2-135M's
projections, it is about 1.2x faster than float32 at batch 1 (half the bytes) but about 4x
slower at batch 16, where batching matters (`benchmarks/RESULTS.md`, "Weight dtypes"). The
fast format on such a CPU is `--quantization fp16`, which is not a compute dtype. The
decision reads flags, not timings, so the same machine always makes the same choice.

Stdlib only: the harness resolves a recorded `auto` with it too.
"""

from __future__ import annotations

import functools

NATIVE_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


@functools.cache
def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The first CPU's feature flags (empty where /proc/cpuinfo does not exist)."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_has_native_bf16(flags: frozenset[str] | None = None) -> bool:
    return bool((cpu_flags() if flags is None else flags) & NATIVE_BF16_CPU_FLAGS)


def resolve_model_dtype(dtype: str, device: str = "cpu", flags: frozenset[str] | None = None) -> str:
    """`dtype` with `auto` replaced by the choice for `device`."""
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        return "bfloat16"
    return "bfloat16" if cpu_has_native_bf16(flags) else "float32"
