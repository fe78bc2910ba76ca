"""What `--dtype auto` and `--quantization auto` mean on this machine, and the flags they are
decided from.

`--quantization auto` (the default) is fp16 weights on a CPU where fbgemm's fp16 GEMM runs
(AVX2 with F16C: every x86 CPU of the last decade), when `--dtype` is left at `auto`; nothing
elsewhere (CUDA, other CPUs, or a `--dtype` given explicitly: `--dtype float32` is the exact
path, one flag away). Measured on SmolLM2-135M, one thread, batch 1 (`benchmarks/RESULTS.md`,
"Weight dtypes" and the decode table beside llama.cpp), fp16 weights decode about 1.5x faster
than float32 and than bfloat16 even on a CPU with native bf16 matmul, and score the same text
at a perplexity ratio of about 0.9998 to float32 (`tests/server/test_server_perplexity.py`).

`--dtype auto` is then float32, the activations fbgemm's fp16 GEMM computes in. Without fp16
weights it is, as in vLLM, a 16-bit dtype where the hardware computes in it natively and
float32 elsewhere: on CUDA bfloat16; on a CPU bfloat16 only if it reports native bf16 matrix
instructions (AVX512_BF16 or AMX_BF16). Without them torch's bf16 matmul runs through
conversions, about 4x slower than float32 at batch 16.

The decision reads flags, not timings, so the same machine always makes the same choice.
Stdlib only: the harness resolves a recorded `auto` with it too.
"""

from __future__ import annotations

import functools

NATIVE_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
# fbgemm's fp16 GEMM needs AVX2 (its CPU check), and F16C to widen the weights.
FP16_GEMM_CPU_FLAGS = frozenset({"avx2", "f16c"})


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


def cpu_has_fp16_gemm(flags: frozenset[str] | None = None) -> bool:
    return FP16_GEMM_CPU_FLAGS <= (cpu_flags() if flags is None else flags)


def resolve_quantization(
    quantization: str | None, dtype: str = "auto", device: str = "cpu", flags: frozenset[str] | None = None
) -> str | None:
    """The weight-only format `quantization` means (None: plain `dtype` weights). `none` and
    None mean none; `auto` is fp16 on a CPU with fbgemm's fp16 GEMM when `dtype` is `auto`."""
    if quantization != "auto":
        return None if quantization in (None, "none") else quantization
    if dtype == "auto" and device.startswith("cpu") and cpu_has_fp16_gemm(flags):
        return "fp16"
    return None


def resolve_model_dtype(
    dtype: str, device: str = "cpu", flags: frozenset[str] | None = None, quantization: str | None = "auto"
) -> str:
    """`dtype` with `auto` replaced by the choice for `device` under `quantization`."""
    if dtype != "auto":
        return dtype
    if device.startswith("cuda"):
        return "bfloat16"
    if resolve_quantization(quantization, dtype, device, flags) == "fp16":
        return "float32"  # what fbgemm's fp16 GEMM computes in
    return "bfloat16" if cpu_has_native_bf16(flags) else "float32"
