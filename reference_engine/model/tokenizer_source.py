"""A model's tokenizer without its weights: what the API server loads while the engine core
loads the model (the server tokenizes and detokenizes; the core never sees text).

Torch-free: GGUF metadata is read with `gguf` (a memory map; tensor data is never touched),
a Hugging Face folder's JSON files directly.
"""

from __future__ import annotations

import os

from reference_engine.model.builtin import SMOLLM2_NAME, TINY_RANDOM_NAME, smollm2_gguf_path
from reference_engine.model.errors import ModelLoadError
from reference_engine.model.tokenizer import Tokenizer, byte_tokenizer, tokenizer_from_gguf


def gguf_tokenizer(path: str) -> Tokenizer:
    import gguf

    if not os.path.isfile(path):
        raise ModelLoadError(f"{path}: GGUF file not found")
    try:
        reader = gguf.GGUFReader(path, "r")
        fields = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    except Exception as exc:  # the reader raises ValueError, struct/numpy errors... on bad bytes
        raise ModelLoadError(f"{path}: corrupt or truncated GGUF file ({type(exc).__name__}: {exc})") from exc
    return tokenizer_from_gguf(fields, path)


def load_tokenizer(name_or_path: str) -> Tokenizer:
    """The tokenizer `load_model(name_or_path)` would come with. Raises ModelLoadError."""
    if name_or_path == TINY_RANDOM_NAME:
        return byte_tokenizer()
    path = smollm2_gguf_path() if name_or_path == SMOLLM2_NAME else name_or_path
    if os.path.isdir(path):
        from reference_engine.model.hf_metadata import read_hf_tokenizer

        return read_hf_tokenizer(path)
    if os.path.isfile(path):
        return gguf_tokenizer(path)
    raise ModelLoadError(f"{name_or_path}: no such file or directory, and not a builtin model")
