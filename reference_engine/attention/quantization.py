"""KV cache storage formats: which dtype a cache holds, and how values are quantized into it.

Formats (the `kv_cache_dtype` setting; the list is `config.KVCacheDType`):

* `auto` stores the model dtype; `float32`, `float16`, `bfloat16` store that dtype. Values
  are cast on store and read back as fp32.
* `fp8`: `torch.float8_e4m3fn` with one float32 scale per tensor (K and V of each layer
  separately). The scale is calibrated on the layer's first write
  (`kv_cache.calibrate_fp8_scales`) as `max(amax, FP8_AMAX_FLOOR) / (448 / FP8_HEADROOM)`:
  later tokens can be twice as large as anything in the first batch before they saturate
  (e4m3's dynamic range is wide, so the headroom costs nothing measurable), and the floor
  keeps a warm-up write of zeros from leaving a uselessly tiny scale. Values beyond the range
  saturate to +-448 (e4m3fn has no infinity; an unclamped cast would produce NaN on some
  platforms).
* `int8`: symmetric, one scale per (token, KV head) = absmax over head_dim / 127, stored as
  float16 in `[num_blocks, block_size, num_kv_heads]`. float16 rather than float32 keeps the
  overhead at 2 bytes per token-head, so int8 holds `2 * head_dim / (head_dim + 2)` times the
  tokens of 16-bit KV at the same memory (1.94x at head_dim 64, 1.97x at 128); fp8 holds
  exactly 2x. The value is quantized against the *stored* (float16-rounded) scale so that
  dequantization inverts exactly what was stored.

Rounding is round-half-to-even everywhere (torch's `round` and e4m3 casts); the Triton
write kernel reproduces it bit for bit, so the two paths write identical caches.
"""

from __future__ import annotations

from enum import IntEnum

import torch

from reference_engine.config import MODEL_DTYPES, ConfigError, check_kv_cache_dtype

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
FP8_HEADROOM = 2.0
FP8_AMAX_FLOOR = 1.0
INT8_MAX = 127.0
INT8_SCALE_DTYPE = torch.float16
# The smallest divisor used for an all-zero int8 row: any positive value gives q = 0 there.
INT8_MIN_DIVISOR = 1e-30

# One torch dtype per `ModelDType` name; also what the float `kv_cache_dtype` settings store.
_FLOAT_DTYPES = {name: getattr(torch, name) for name in MODEL_DTYPES}


class KVQuant(IntEnum):
    """How a cache's values map to real numbers. The values are the kernels' QUANT constexpr."""

    NONE = 0
    FP8_PER_TENSOR = 1
    INT8_PER_TOKEN_HEAD = 2


def as_model_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """A model dtype given as a torch dtype or by name (`EngineConfig.dtype`: "float32", ...)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    name = dtype.removeprefix("torch.")
    if name not in _FLOAT_DTYPES:
        raise ConfigError(f"model dtype must be one of {', '.join(_FLOAT_DTYPES)}, got {dtype!r}")
    return _FLOAT_DTYPES[name]


def kv_storage_dtype(kv_cache_dtype: str, model_dtype: torch.dtype | str) -> torch.dtype:
    """The element dtype of the K/V tensors for a `kv_cache_dtype` setting."""
    check_kv_cache_dtype(kv_cache_dtype)
    if kv_cache_dtype == "auto":
        return as_model_dtype(model_dtype)
    if kv_cache_dtype == "fp8":
        return FP8_DTYPE
    if kv_cache_dtype == "int8":
        return torch.int8
    return _FLOAT_DTYPES[kv_cache_dtype]


def kv_quant_of(storage_dtype: torch.dtype) -> KVQuant:
    if storage_dtype == FP8_DTYPE:
        return KVQuant.FP8_PER_TENSOR
    if storage_dtype == torch.int8:
        return KVQuant.INT8_PER_TOKEN_HEAD
    return KVQuant.NONE


def fp8_scale_for(amax: torch.Tensor) -> torch.Tensor:
    """The per-tensor fp8 scale for values whose absolute maximum is `amax` (see module doc)."""
    return amax.float().clamp(min=FP8_AMAX_FLOOR) * (FP8_HEADROOM / FP8_MAX)


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`x / scale`, saturated to e4m3's range, rounded to nearest even."""
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row symmetric int8 over the last dim: returns (`int8` values, float16 scales `x.shape[:-1]`)."""
    x = x.float()
    scale = (x.abs().amax(dim=-1) / INT8_MAX).to(INT8_SCALE_DTYPE)
    divisor = scale.float().clamp(min=INT8_MIN_DIVISOR)[..., None]
    q = torch.round(x / divisor).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def dequantize(data: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """fp32 values of cache entries `data` `[..., head_dim]`; `scale` is per-tensor `[1]` or
    per-row `data.shape[:-1]`."""
    quant = kv_quant_of(data.dtype)
    if quant == KVQuant.NONE:
        return data.float()
    assert scale is not None, "a quantized cache needs its scales"
    if quant == KVQuant.FP8_PER_TENSOR:
        return data.float() * scale
    return data.float() * scale.float()[..., None]
