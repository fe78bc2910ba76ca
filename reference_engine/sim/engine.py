"""Build the simulated engine: the real `LLMEngine` with a pool sized like the named model on
the named GPU, and the simulator's executor in place of the model.

Sizing is the cost model's `simulated_num_blocks` (vLLM's arithmetic: memory x utilisation
- weights / tp - overhead, divided by the KV bytes of one block on one rank), so the block
count, and with it every KV-usage and preemption figure, is what that deployment would have.

Torch-free: the tokenizer is SmolLM2's, rebuilt from the GGUF file's metadata with the
`gguf` and `tokenizers` packages, so a simulation runs where torch is not installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reference_engine.catalogue import CatalogueError, get_gpu, get_model
from reference_engine.clock import HOST_CLOCK, Clock
from reference_engine.config import ConfigError, EngineConfig
from reference_engine.engine import LLMEngine, engine_from_config
from reference_engine.sim.cost_model import CostModel, StepTimeModel, simulated_num_blocks
from reference_engine.sim.executor import SimExecutor
from reference_engine.sim.spec import SimSpec


@dataclass(slots=True)
class SimEngine:
    """Same fields the server reads from a real BuiltEngine, plus the simulator's parts."""

    engine: LLMEngine
    executor: SimExecutor
    tokenizer: object
    model_name: str
    max_model_len: int
    num_blocks: int
    kv_cache_dtype: str
    cost: CostModel


def load_sim_tokenizer():
    """SmolLM2's byte-level BPE tokenizer, read from the GGUF metadata only (no weights)."""
    from reference_engine.model.builtin import smollm2_gguf_path
    from reference_engine.model.tokenizer_source import gguf_tokenizer

    return gguf_tokenizer(smollm2_gguf_path())


def word_vocabulary(tokenizer) -> list[int]:
    """Ids of tokens that are a space plus ASCII letters (byte-level BPE spells the space 'Ġ'):
    drawn in sequence they read as words and re-tokenize to the same count. Falls back to all
    non-special tokens for other vocabularies."""
    vocab: dict[str, int] = tokenizer.backend.get_vocab(with_added_tokens=False)
    words = sorted(
        i
        for t, i in vocab.items()
        if t.startswith("Ġ") and len(t) > 2 and t[1:].isascii() and t[1:].isalpha()
    )
    if len(words) >= 256:
        return words
    eos = set(getattr(tokenizer, "eos_token_ids", ()))
    return sorted(i for i in vocab.values() if i not in eos)


def _kv_dtype(name: str) -> str:
    """The engine's `auto` means the model's 16-bit dtype, as in vLLM; fp32 is not simulated."""
    return {"float16": "fp16", "bfloat16": "bf16"}.get(name, name)


def build_sim_engine(
    spec: SimSpec,
    config: EngineConfig,
    tokenizer=None,
    vocab: Sequence[int] | None = None,
    sleep: bool = True,
    step_cost: StepTimeModel | None = None,
    detokenize: bool = True,
    clock: Clock = HOST_CLOCK,
) -> SimEngine:
    """Raises ConfigError for an unknown model or GPU, a model that does not fit, or a
    max_model_len that one request cannot hold. `step_cost` times the steps instead of the
    catalogue's cost model (which still sizes the pool): a calibration hook.
    `detokenize=False` builds an engine core's engine (see `LLMEngine`). `clock`: the one
    clock of the executor and the engine (a replay's `VirtualClock`; the host's by default)."""
    config.validate()
    try:
        model, gpu = get_model(spec.model), get_gpu(spec.gpu)
    except CatalogueError as exc:
        raise ConfigError(str(exc)) from None
    if config.kv_cache_memory is not None:
        raise ConfigError("--kv-cache-memory does not apply to a simulation; use --gpu-memory-utilization")
    kv_dtype = _kv_dtype(config.kv_cache_dtype)
    max_model_len = config.max_model_len or model.max_context
    if max_model_len > model.max_context:
        raise ConfigError(
            f"max_model_len {max_model_len} exceeds {model.name}'s context of {model.max_context}"
        )
    try:
        cost = CostModel(model, gpu, spec.tensor_parallel_size, spec.weight_dtype, kv_dtype)
    except (ValueError, CatalogueError) as exc:
        raise ConfigError(str(exc)) from None
    num_blocks = config.num_blocks or simulated_num_blocks(
        model,
        gpu,
        spec.tensor_parallel_size,
        spec.gpu_memory_utilization,
        kv_dtype,
        config.block_size,
        max_model_len,
        weight_dtype=spec.weight_dtype,
    )
    if num_blocks < 2:
        raise ConfigError(f"{model.name} on {gpu.name} leaves {num_blocks} KV blocks; at least 2 are needed")
    tokenizer = tokenizer or load_sim_tokenizer()
    executor = SimExecutor(step_cost or cost, vocab or word_vocabulary(tokenizer), sleep=sleep, clock=clock)
    engine = engine_from_config(
        config, executor, tokenizer, num_blocks, max_model_len, tokenizer.vocab_size, detokenize, clock
    )
    return SimEngine(
        engine, executor, tokenizer, model.name, max_model_len, num_blocks, config.kv_cache_dtype, cost
    )
