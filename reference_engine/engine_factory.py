"""Build a real-model engine from an EngineConfig: load weights, size and allocate the KV
pool, pick the attention backend, wire runner, sampler and scheduler together."""

from __future__ import annotations

import os
from dataclasses import dataclass

from reference_engine.config import ConfigError, EngineConfig
from reference_engine.engine import LLMEngine, engine_from_config
from reference_engine.model.registry import LoadedModel, load_model
from reference_engine.model_dtype import resolve_model_dtype, resolve_quantization


@dataclass(slots=True)
class BuiltEngine:
    engine: LLMEngine
    loaded: LoadedModel
    model_name: str
    max_model_len: int
    num_blocks: int
    kv_cache_dtype: str
    bytes_per_block: int

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def weights(self) -> str:
        """How the weights are held, for logs and the core's ready message."""
        return self.loaded.describe_weights()


def size_pool(config: EngineConfig, bytes_per_block: int) -> int:
    """Blocks in the pool, the null block included (like vLLM's num_gpu_blocks)."""
    if config.num_blocks is not None:
        return config.num_blocks
    if config.kv_cache_memory is not None:
        num_blocks = config.kv_cache_memory // bytes_per_block
        if num_blocks < 2:
            raise ConfigError(
                f"kv_cache_memory of {config.kv_cache_memory} bytes holds {num_blocks} blocks of "
                f"{bytes_per_block} bytes; at least 2 are needed"
            )
        return num_blocks
    return config.default_num_blocks


def build_engine(
    config: EngineConfig, loaded: LoadedModel | None = None, detokenize: bool = True
) -> BuiltEngine:
    """Raises ConfigError or ModelLoadError, before any request can be accepted.

    `loaded` (a model loaded already) sets the weights; `config.dtype` must then be `auto` or
    the same, and an explicit `config.quantization` must find it quantized. Without it the
    weights are `config.dtype` and `config.quantization` as this machine resolves them
    (`reference_engine.model_dtype`). `detokenize=False` builds an engine core's engine (see
    `LLMEngine`)."""
    import torch

    from reference_engine.attention.backend import get_attention_backend, validate_attention_config
    from reference_engine.attention.kv_cache import allocate_kv_caches, kv_cache_bytes_per_block
    from reference_engine.model_executor import ModelExecutor
    from reference_engine.model_runner import ModelRunner

    config.validate()
    torch.set_num_threads(config.num_threads or max(1, (os.cpu_count() or 2) // 2))
    if loaded is None:
        dtype = resolve_model_dtype(config.dtype, config.device, quantization=config.quantization)
        quantization = resolve_quantization(config.quantization, config.dtype, config.device)
        loaded = load_model(config.model, dtype, config.device, config.seed, quantization)
    elif config.dtype not in ("auto", loaded.dtype_name):
        raise ConfigError(f"dtype {config.dtype} was asked for, but the model given is {loaded.dtype_name}")
    elif config.quantization in ("int8", "fp16") and not loaded.weights:
        raise ConfigError(
            f"quantization {config.quantization} was asked for, but the model given is not quantized"
        )
    dtype = loaded.dtype_name
    mc = loaded.config
    backend = get_attention_backend(config.attention_backend, config.device)
    validate_attention_config(backend, config.block_size, mc.head_dim, config.kv_cache_dtype, config.device)
    max_model_len = config.max_model_len or mc.max_position_embeddings
    if max_model_len > mc.max_position_embeddings:
        raise ConfigError(
            f"max_model_len {max_model_len} exceeds the model's context of {mc.max_position_embeddings}"
        )
    bytes_per_block = kv_cache_bytes_per_block(
        mc.num_layers, config.block_size, mc.num_kv_heads, mc.head_dim, config.kv_cache_dtype, dtype
    )
    num_blocks = size_pool(config, bytes_per_block)
    caches = allocate_kv_caches(
        mc.num_layers,
        num_blocks,
        config.block_size,
        mc.num_kv_heads,
        mc.head_dim,
        kv_cache_dtype=config.kv_cache_dtype,
        model_dtype=dtype,
        device=config.device,
    )
    native = None
    if not config.enforce_eager:
        from reference_engine.model.native_decode import native_decode_stack

        native = native_decode_stack(loaded.model)
    runner = ModelRunner(loaded, caches, config.block_size, backend, native)
    eos = tuple(loaded.tokenizer.eos_token_ids)
    executor = ModelExecutor(runner, eos)
    engine = engine_from_config(
        config, executor, loaded.tokenizer, num_blocks, max_model_len, mc.vocab_size, detokenize
    )
    return BuiltEngine(
        engine, loaded, config.model, max_model_len, num_blocks, config.kv_cache_dtype, bytes_per_block
    )
