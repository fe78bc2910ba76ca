"""Resolve a model name or path to a loaded model: the one entry point the engine calls.

Import-light: torch and the loaders are imported inside `load_model`, so listing names or
resolving paths (CLI, harness) never pulls in torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from reference_engine.config import MODEL_DTYPES
from reference_engine.model.builtin import BUILTIN_MODELS, SMOLLM2_NAME, TINY_RANDOM_NAME, smollm2_gguf_path
from reference_engine.model.config import ModelConfig
from reference_engine.model.errors import ModelLoadError

if TYPE_CHECKING:
    import torch

    from reference_engine.model.llama import LlamaForCausalLM
    from reference_engine.model.tokenizer import Tokenizer


@dataclass(slots=True)
class LoadedModel:
    """Everything the runner and the server need. `source` is the file, folder or builtin
    name the weights came from (shown in logs and /v1/models)."""

    config: ModelConfig
    model: LlamaForCausalLM
    tokenizer: Tokenizer
    source: str
    weights: str = ""  # how the weights are held, when not plainly `dtype` (quantization)

    @property
    def dtype(self) -> torch.dtype:
        """The model's float dtype (of its norms and embedding, also under int8)."""
        return self.model.model.norm.weight.dtype

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def describe_weights(self) -> str:
        return self.weights or self.dtype_name


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in MODEL_DTYPES:
        raise ModelLoadError(f"unsupported model dtype {dtype!r} (supported: {', '.join(MODEL_DTYPES)})")
    return getattr(torch, dtype)


def _looks_like_path(name: str) -> bool:
    return os.sep in name or name.startswith(".") or name.endswith((".gguf", ".json", ".safetensors"))


def load_model(
    name_or_path: str,
    dtype: str | torch.dtype = "float32",
    device: str = "cpu",
    seed: int = 0,
    quantization: str | None = None,
) -> LoadedModel:
    """Load a builtin model (`smollm2-135m`, `tiny-random`), a `.gguf` file or an HF folder.

    `dtype` is a model dtype (float32, bfloat16, float16; not `auto`: resolve that first, see
    `reference_engine.model_dtype`). `quantization="int8"` then makes the decoder's projections
    weight-only int8 (`reference_engine.model.int8_linear`), `"fp16"` the projections and the
    logits head float16 (`reference_engine.model.fp16_linear`). `seed` only matters for
    `tiny-random`. Every failure is a ModelLoadError naming the source and the problem.
    """
    loaded = _load(name_or_path, dtype, device, seed)
    if quantization == "int8":
        from reference_engine.model.int8_linear import KERNEL_DTYPE, quantize_model_int8

        quantize_model_int8(loaded.model)
        kernel = str(KERNEL_DTYPE).removeprefix("torch.")
        loaded.weights = f"int8 per-channel projections ({kernel} there), {loaded.dtype_name} elsewhere"
    elif quantization == "fp16":
        from reference_engine.model.fp16_linear import KERNEL, quantize_model_fp16

        quantize_model_fp16(loaded.model)
        loaded.weights = f"float16 projections and logits head ({KERNEL}), {loaded.dtype_name} elsewhere"
    elif quantization is not None:
        raise ModelLoadError(f"unsupported quantization {quantization!r} (supported: int8, fp16)")
    return loaded


def _load(name_or_path: str, dtype: str | torch.dtype, device: str, seed: int) -> LoadedModel:
    from reference_engine.model.llama import build_model

    torch_dtype = resolve_dtype(dtype)
    if name_or_path == TINY_RANDOM_NAME:
        from reference_engine.model.tiny_random import (
            tiny_random_config,
            tiny_random_state_dict,
            tiny_random_tokenizer,
        )

        config = tiny_random_config()
        model = build_model(
            config, tiny_random_state_dict(config, seed), torch_dtype, device, TINY_RANDOM_NAME
        )
        return LoadedModel(config, model, tiny_random_tokenizer(), TINY_RANDOM_NAME)
    if name_or_path == SMOLLM2_NAME:
        path = smollm2_gguf_path()
    elif os.path.exists(name_or_path):
        path = name_or_path
    elif _looks_like_path(name_or_path):
        raise ModelLoadError(f"{name_or_path}: no such file or directory")
    else:
        valid = ", ".join(BUILTIN_MODELS)
        raise ModelLoadError(
            f"unknown model {name_or_path!r}: expected one of {valid}, a path to a .gguf file, "
            "or a Hugging Face model folder"
        )
    if os.path.isdir(path):
        from reference_engine.model.hf_loader import load_hf_folder

        contents = load_hf_folder(path)
    else:
        from reference_engine.model.gguf_loader import load_gguf

        contents = load_gguf(path)
    model = build_model(contents.config, contents.state_dict, torch_dtype, device, path)
    return LoadedModel(contents.config, model, contents.tokenizer, path)
