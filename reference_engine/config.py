"""Engine configuration: one typed record, passed explicitly (no global state).

The `Literal` types below are the only lists of allowed values: the tuples next to them are
derived with `typing.get_args`, and the engine's flags (`reference_engine.engine_args`) take
their choices from the same types. Each flag's help text lives on its field (`arg_field`).
Stdlib only, so the harness and the catalogue can read it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from reference_engine.arg_field import arg_field
from reference_engine.kv_events.config import KVEventsConfig, KVEventsConfigError, parse_kv_events_config

# paged: blocks on demand. contiguous: each request reserves max_model_len tokens at
# admission (the pre-paging systems the PagedAttention paper measures). contiguous-oracle:
# reserves exactly prompt + max_tokens, the paper's bound for a system that knew each
# request's true output length.
AllocatorMode = Literal["paged", "contiguous", "contiguous-oracle"]
# auto: the model dtype. fp8 and int8 are quantized (see attention/quantization.py).
KVCacheDType = Literal["auto", "float32", "float16", "bfloat16", "fp8", "int8"]
AttentionBackendName = Literal["auto", "torch", "triton"]
ModelDType = Literal["float32", "float16", "bfloat16"]
# auto: float32 under fp16 weights; else bfloat16 where it is computed natively, float32
# elsewhere (reference_engine.model_dtype).
ModelDTypeSetting = Literal["auto", "float32", "float16", "bfloat16"]
# Weight-only formats; activations keep the model's float dtype. int8: one scale per output
# channel. fp16: float16 weights on fbgemm's fp16 GEMM (CPU only). auto: fp16 on a CPU with
# fbgemm's fp16 GEMM when --dtype is auto, else none (reference_engine.model_dtype). None, as
# runs recorded it before `auto` existed, means none.
QuantizationSetting = Literal["auto", "none", "int8", "fp16"]

ALLOCATORS: tuple[AllocatorMode, ...] = get_args(AllocatorMode)
KV_CACHE_DTYPES: tuple[KVCacheDType, ...] = get_args(KVCacheDType)
ATTENTION_BACKENDS: tuple[AttentionBackendName, ...] = get_args(AttentionBackendName)
MODEL_DTYPES: tuple[ModelDType, ...] = get_args(ModelDType)
MODEL_DTYPE_SETTINGS: tuple[ModelDTypeSetting, ...] = get_args(ModelDTypeSetting)
QUANTIZATION_SETTINGS: tuple[QuantizationSetting, ...] = get_args(QuantizationSetting)

DEFAULT_NUM_BLOCKS = 1024


class ConfigError(ValueError):
    """A configuration that cannot work; raised before any request is accepted."""


def check_kv_cache_dtype(kv_cache_dtype: str) -> None:
    if kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ConfigError(
            f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, got {kv_cache_dtype!r}"
        )


@dataclass(slots=True)
class EngineConfig:
    """How the engine is sized and scheduled. Flag names follow vLLM's.

    Exactly one of `num_blocks` and `kv_cache_memory` sizes the pool; when both are None
    the engine picks `default_num_blocks`. `num_blocks` counts the null block (block 0),
    like vLLM's `num_gpu_blocks`, so the usable pool is `num_blocks - 1`.
    """

    model: str = arg_field(
        "smollm2-135m",
        "smollm2-135m, tiny-random, a .gguf file or a Hugging Face folder (default: %(default)s)",
    )
    num_blocks: int | None = arg_field(
        None, f"KV blocks in the pool, null block included (default: {DEFAULT_NUM_BLOCKS})", exclusive="pool"
    )
    # bytes for K and V across all layers
    kv_cache_memory: int | None = arg_field(
        None, "size the pool from a KV memory budget in bytes instead", metavar="BYTES", exclusive="pool"
    )
    block_size: int = arg_field(16, "tokens per KV block (default: %(default)s)")
    max_num_seqs: int = arg_field(64, "most sequences running at once (default: %(default)s)")
    max_num_batched_tokens: int = arg_field(2048, "token budget per step (default: %(default)s)")
    max_model_len: int | None = arg_field(None, "context limit per request (default: the model's)")
    allocator: AllocatorMode = arg_field(
        "paged",
        "paged; contiguous: reserve max-model-len per request up front (the pre-paging baseline); "
        "contiguous-oracle: reserve prompt + max-tokens (default: %(default)s)",
    )
    enable_prefix_caching: bool = arg_field(
        True, "turn the prefix cache off", flag="--no-enable-prefix-caching"
    )
    watermark: float = 0.01  # share of blocks kept free when admitting, against churn
    kv_cache_dtype: KVCacheDType = arg_field(
        "auto",
        "KV storage type; fp8 and int8 hold twice the tokens of 16-bit (default: %(default)s = model dtype)",
    )
    attention_backend: AttentionBackendName = arg_field(
        "auto", "auto: Triton on CUDA, torch on CPU (default: %(default)s)"
    )
    dtype: ModelDTypeSetting = arg_field(
        "auto",
        "weight and activation dtype; auto: float32 under fp16 weights (--quantization auto on an "
        "AVX2 CPU), else bfloat16 on CUDA and on CPUs with native bf16 matmul (AVX512_BF16/AMX) "
        "and float32 elsewhere; an explicit float32 is the exact path (default: %(default)s)",
    )
    quantization: QuantizationSetting | None = arg_field(
        "auto",
        "weight-only format. fp16: float16 projections and logits head on fbgemm's fp16 GEMM with "
        "float32 activations, half of float32's weight bytes, the fastest at batch 1 on a CPU "
        "(CPU only); int8: one scale per output channel (torch's int8 weight-pack matmul, bfloat16 "
        "activations at each projection), a quarter of the bytes; none: the weights in --dtype; "
        "auto: fp16 on a CPU with AVX2 and F16C when --dtype is auto, else none (default: %(default)s)",
    )
    device: str = arg_field("cpu", "torch device (default: %(default)s)")
    enforce_eager: bool = arg_field(
        False,
        "decode every step in Python, without the native decode stack (C++ over the same torch "
        "ops, bit for bit the same results, built into the kvscope cache on first use)",
    )
    seed: int = arg_field(0, "seed for tiny-random weights (default: %(default)s)")
    # torch intra-op threads. None: half the cores, at least one. Oversubscribed OpenMP
    # threads spin against the server's event loop and load generators on the same cores;
    # measured on 2 loaded cores, tiny-random ran 50x slower with 2 threads than with 1.
    num_threads: int | None = arg_field(None, "torch CPU threads (default: half the cores, at least 1)")
    kv_events_config: str | None = arg_field(
        None,
        "publish KV cache events over ZeroMQ in vLLM's format; vLLM's JSON, e.g. "
        '\'{"enable_kv_cache_events": true, "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}\'',
        metavar="JSON",
    )
    kv_cache_metrics: bool = arg_field(
        False, "expose vLLM's sampled block residency histograms (vllm:kv_block_*_seconds) on /metrics"
    )
    kv_cache_metrics_sample: float = arg_field(
        0.01, "share of block allocations --kv-cache-metrics tracks, in (0, 1] (default: %(default)s)"
    )

    default_num_blocks: int = DEFAULT_NUM_BLOCKS

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
        if self.dtype not in MODEL_DTYPE_SETTINGS:
            raise ConfigError(f"dtype must be one of {', '.join(MODEL_DTYPE_SETTINGS)}, got {self.dtype!r}")
        if self.quantization is not None and self.quantization not in QUANTIZATION_SETTINGS:
            raise ConfigError(
                f"quantization must be one of {', '.join(QUANTIZATION_SETTINGS)}, got {self.quantization!r}"
            )
        if self.quantization == "fp16" and not self.device.startswith("cpu"):
            raise ConfigError(f"quantization fp16 runs on the CPU (fbgemm), not on {self.device}")
        if not 0.0 <= self.watermark < 1.0:
            raise ConfigError(f"watermark must be in [0, 1), got {self.watermark}")
        if not 0.0 < self.kv_cache_metrics_sample <= 1.0:
            raise ConfigError(
                f"kv_cache_metrics_sample must be in (0, 1], got {self.kv_cache_metrics_sample}"
            )
        self.kv_events()

    def kv_events(self) -> KVEventsConfig | None:
        """The parsed --kv-events-config, None when events are not published. Raises
        ConfigError for a value vLLM would refuse."""
        if self.kv_events_config is None:
            return None
        try:
            config = parse_kv_events_config(self.kv_events_config)
        except KVEventsConfigError as exc:
            raise ConfigError(str(exc)) from None
        if config.publishes and not self.enable_prefix_caching:
            raise ConfigError("KV cache events need the prefix cache (drop --no-enable-prefix-caching)")
        return config if config.publishes else None

    @property
    def residency_sample_rate(self) -> float | None:
        """--kv-cache-metrics-sample when --kv-cache-metrics is on, else None."""
        return self.kv_cache_metrics_sample if self.kv_cache_metrics else None
