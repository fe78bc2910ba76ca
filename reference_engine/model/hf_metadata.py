"""A Hugging Face Llama folder's metadata: `config.json` and the tokenizer files, read without
torch (the API server loads the tokenizer while the engine core loads the weights).
"""

from __future__ import annotations

import json
import os
from typing import Any

from reference_engine.model.config import ModelConfig
from reference_engine.model.errors import ModelLoadError
from reference_engine.model.tokenizer import Tokenizer

_SUPPORTED = ("LlamaForCausalLM", "MistralForCausalLM")


def read_json(path: str, required: bool = True) -> dict[str, Any]:
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
    tok_cfg = read_json(os.path.join(folder, "tokenizer_config.json"), required=False)
    gen_cfg = read_json(os.path.join(folder, "generation_config.json"), required=False)
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
    return tokenizer_from_hf(folder, config_from_hf(read_json(os.path.join(folder, "config.json")), folder))
