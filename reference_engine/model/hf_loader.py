"""Load a Hugging Face Llama folder: `config.json`, `*.safetensors`, `tokenizer.json`.

HF checkpoints are already in the layout the model uses (rotate-half Q/K rows, `[out, in]`
weights), so loading is reading plus name checks; no permutation happens here. Torch loads
only with the weights, so the API server can read a folder's tokenizer without it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from reference_engine.model.config import ModelConfig
from reference_engine.model.errors import ModelLoadError
from reference_engine.model.tokenizer import Tokenizer

if TYPE_CHECKING:
    import torch

_SUPPORTED = ("LlamaForCausalLM", "MistralForCausalLM")


@dataclass(slots=True)
class HFContents:
    config: ModelConfig
    state_dict: dict[str, torch.Tensor]
    tokenizer: Tokenizer


def _read_json(path: str, required: bool = True) -> dict[str, Any]:
    if not os.path.isfile(path):
        if required:
            raise ModelLoadError(f"{path}: file not found")
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path}: not valid JSON ({exc})") from exc


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def config_from_hf(cfg: dict[str, Any], folder: str) -> ModelConfig:
    archs = cfg.get("architectures") or []
    if archs and archs[0] not in _SUPPORTED:
        raise ModelLoadError(
            f"{folder}: architecture {archs[0]} is not supported (supported: {', '.join(_SUPPORTED)})"
        )
    try:
        hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        return ModelConfig(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=tuple(_ids(cfg.get("eos_token_id"))),
            rope_scaling=cfg.get("rope_scaling"),
            name=os.path.basename(os.path.normpath(folder)),
        )
    except KeyError as exc:
        raise ModelLoadError(f"{folder}/config.json: missing key {exc.args[0]!r}") from exc


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


def _special_id(backend, value: Any) -> int | None:
    text = value.get("content") if isinstance(value, dict) else value
    return backend.token_to_id(text) if isinstance(text, str) else None


def tokenizer_from_hf(folder: str, config: ModelConfig) -> Tokenizer:
    import tokenizers

    path = os.path.join(folder, "tokenizer.json")
    if not os.path.isfile(path):
        raise ModelLoadError(f"{path}: file not found (only fast tokenizers are supported)")
    try:
        backend = tokenizers.Tokenizer.from_file(path)
    except Exception as exc:
        raise ModelLoadError(f"{path}: not a valid tokenizer ({exc})") from exc
    tok_cfg = _read_json(os.path.join(folder, "tokenizer_config.json"), required=False)
    gen_cfg = _read_json(os.path.join(folder, "generation_config.json"), required=False)
    template = tok_cfg.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    jinja_path = os.path.join(folder, "chat_template.jinja")
    if template is None and os.path.isfile(jinja_path):
        with open(jinja_path, encoding="utf-8") as f:
            template = f.read()
    eos = _ids(gen_cfg.get("eos_token_id")) + list(config.eos_token_ids)
    eos.append(_special_id(backend, tok_cfg.get("eos_token")))
    bos = _special_id(backend, tok_cfg.get("bos_token"))
    return Tokenizer(
        backend=backend,
        eos_token_ids=tuple(dict.fromkeys(i for i in eos if i is not None)),
        bos_token_id=bos if bos is not None else config.bos_token_id,
        add_bos=False,  # tokenizer.json's post-processor already adds BOS when the model wants it
        chat_template=template,
    )


def read_hf_tokenizer(folder: str) -> Tokenizer:
    """The folder's tokenizer alone (no weights, no torch)."""
    return tokenizer_from_hf(folder, config_from_hf(_read_json(os.path.join(folder, "config.json")), folder))


def load_hf_folder(folder: str) -> HFContents:
    if not os.path.isdir(folder):
        raise ModelLoadError(f"{folder}: not a directory")
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise ModelLoadError(f"{folder}: not a Hugging Face model folder (no config.json)")
    config = config_from_hf(_read_json(os.path.join(folder, "config.json")), folder)
    state = _load_safetensors(folder)
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)  # some exports store the tied copy too
    # Old exports persist the RoPE table; we recompute it from the config.
    state = {k: v for k, v in state.items() if not k.endswith("rotary_emb.inv_freq")}
    tokenizer = tokenizer_from_hf(folder, config)
    config.eos_token_ids = tokenizer.eos_token_ids
    return HFContents(config=config, state_dict=state, tokenizer=tokenizer)
