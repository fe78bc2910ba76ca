"""Llama-family models: config, forward pass, GGUF/HF/tiny-random sources, tokenizer.

May import: torch (in the forward pass and loaders), gguf, safetensors, tokenizers, jinja2 and
the `attention` package; not the scheduler, the server or the simulator. Torch-free at import:
only `builtin`, `config`, `errors` and `registry` names are re-exported here; import
`reference_engine.model.llama` etc. where torch is wanted.
"""

from reference_engine.model.builtin import BUILTIN_MODELS, builtin_model_names
from reference_engine.model.config import ModelConfig
from reference_engine.model.errors import ModelLoadError
from reference_engine.model.registry import LoadedModel, load_model

__all__ = [
    "BUILTIN_MODELS",
    "LoadedModel",
    "ModelConfig",
    "ModelLoadError",
    "builtin_model_names",
    "load_model",
]
