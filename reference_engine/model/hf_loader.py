"""Load a Hugging Face Llama folder: `config.json`, `*.safetensors`, `tokenizer.json`.

HF checkpoints are already in the layout the model uses (rotate-half Q/K rows, `[out, in]`
weights), so loading is reading plus name checks; no permutation happens here. The metadata
(config, tokenizer) is read by `hf_metadata`, which needs no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from reference_engine.model.config import ModelConfig
from reference_engine.model.errors import ModelLoadError
from reference_engine.model.hf_metadata import config_from_hf, read_json, tokenizer_from_hf
from reference_engine.model.tokenizer import Tokenizer


@dataclass(slots=True)
class HFContents:
    config: ModelConfig
    state_dict: dict[str, torch.Tensor]
    tokenizer: Tokenizer


def _load_safetensors(folder: str) -> dict[str, torch.Tensor]:
    try:
        from safetensors.torch import load_file
    except ImportError as exc:
        raise ModelLoadError("loading a Hugging Face folder needs `pip install safetensors`") from exc
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    if not files:
        raise ModelLoadError(f"{folder}: no *.safetensors weights (pickled .bin checkpoints are not loaded)")
    state: dict[str, torch.Tensor] = {}
    for name in files:
        try:
            state.update(load_file(os.path.join(folder, name)))
        except Exception as exc:  # safetensors raises its own error types on corrupt headers
            raise ModelLoadError(f"{os.path.join(folder, name)}: corrupt safetensors file ({exc})") from exc
    return state


def load_hf_folder(folder: str) -> HFContents:
    if not os.path.isdir(folder):
        raise ModelLoadError(f"{folder}: not a directory")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise ModelLoadError(f"{folder}: not a Hugging Face model folder (no config.json)")
    config = config_from_hf(read_json(os.path.join(folder, "config.json")), folder)
    state = _load_safetensors(folder)
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # some exports store the tied copy too
    # Old exports persist the RoPE table; we recompute it from the config.
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    tokenizer = tokenizer_from_hf(folder, config)
    config.eos_token_ids = tokenizer.eos_token_ids
    return HFContents(config=config, state_dict=state, tokenizer=tokenizer)
