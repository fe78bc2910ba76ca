"""Load a Llama-family GGUF file (llama.cpp's format) into HF-layout tensors.

Two conversions undo what llama.cpp's `convert_hf_to_gguf.py` did:
- Shapes: GGUF lists dimensions fastest-first (`[in, out]` for a weight); the reader's
  numpy arrays are already row-major `[out, in]`, which is what HF and torch expect.
- Q/K rows: the converter permutes them so llama.cpp can rotate adjacent pairs (GPT-J
  style); our RoPE rotates dim i with dim i + head_dim/2 (HF "rotate_half"), so we invert
  that permutation. Skipping this still runs but scrambles positions (perplexity explodes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from reference_engine.model.config import ModelConfig
from reference_engine.model.errors import ModelLoadError
from reference_engine.model.tokenizer import Tokenizer, tokenizer_from_gguf

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_SUPPORTED_ARCHS = ("llama",)


@dataclass(slots=True)
class GGUFContents:
    config: ModelConfig
    state_dict: dict[str, torch.Tensor]  # HF names, HF layout, fp32
    tokenizer: Tokenizer


def unpermute_qk(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Inverse of the converter's `permute(w, n_head, n_head_kv)` for one projection.

    The converter does `w.reshape(n, 2, d // 2, ...).swapaxes(1, 2)` per head (n = heads of
    this projection: n_head for Q, n_head_kv for K); reading the result back as
    `(n, d // 2, 2, ...)` and swapping the same axes restores HF's row order.
    """
    rows = weight.shape[0]
    head_dim = rows // num_heads
    return weight.reshape(num_heads, head_dim // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _read(path: str):
    import gguf

    if not os.path.isfile(path):
        raise ModelLoadError(f"{path}: GGUF file not found")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelLoadError(f"{path}: not a GGUF file (magic bytes {magic!r}, expected b'GGUF')")
    try:
        return gguf.GGUFReader(path, "r")
    except Exception as exc:  # the reader raises ValueError, struct/numpy errors... on bad bytes
        raise ModelLoadError(f"{path}: corrupt or truncated GGUF file ({type(exc).__name__}: {exc})") from exc


def _fields(reader) -> dict[str, Any]:
    out = {}
    for key, f in reader.fields.items():
        if not key.startswith("GGUF."):
            out[key] = f.contents()
    return out


def _config(fields: dict[str, Any], names: set[str], path: str) -> ModelConfig:
    arch = fields.get("general.architecture")
    if arch not in _SUPPORTED_ARCHS:
        raise ModelLoadError(
            f"{path}: architecture {arch!r} is not supported (supported: {', '.join(_SUPPORTED_ARCHS)})"
        )

    def get(key: str, default: Any = None) -> Any:
        value = fields.get(f"{arch}.{key}", default)
        if value is None:
            raise ModelLoadError(f"{path}: metadata key {arch}.{key} is missing")
        return value

    hidden, heads = int(get("embedding_length")), int(get("attention.head_count"))
    vocab = fields.get(f"{arch}.vocab_size") or len(fields.get("tokenizer.ggml.tokens") or [])
    return ModelConfig(
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=int(get("feed_forward_length")),
        num_layers=int(get("block_count")),
        num_heads=heads,
        num_kv_heads=int(get("attention.head_count_kv", heads)),
        head_dim=int(get("attention.key_length", hidden // heads)),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        max_position_embeddings=int(get("context_length", 2048)),
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=fields.get("tokenizer.ggml.bos_token_id"),
        name=str(fields.get("general.name") or os.path.basename(path)),
    )


def _hf_name(name: str) -> str | None:
    """`blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight`; None if unknown."""
    stem, _, suffix = name.rpartition(".")
    parts = stem.split(".")
    if parts[0] == "blk" and len(parts) == 3 and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{suffix}"
    if len(parts) == 1 and parts[0] in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[parts[0]]}.{suffix}"
    return None


def _dequantize(tensor, path: str) -> torch.Tensor:
    import gguf

    shape = tuple(int(d) for d in reversed(tensor.shape))  # GGUF order is fastest-first
    try:
        array = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError as exc:
        raise ModelLoadError(
            f"{path}: tensor {tensor.name} has unsupported type {tensor.tensor_type.name}"
        ) from exc
    array = np.ascontiguousarray(array, dtype=np.float32).reshape(shape)
    if not array.flags.writeable:  # unquantized tensors are views of the read-only memory map
        array = array.copy()
    return torch.from_numpy(array)


def load_gguf(path: str, undo_rope_permutation: bool = True) -> GGUFContents:
    """Read config, fp32 HF-layout weights and tokenizer from a GGUF file.

    `undo_rope_permutation=False` exists only to demonstrate (in tests) what a wrong rotary
    layout does to the model; never use it to serve.
    """
    reader = _read(path)
    try:
        fields = _fields(reader)
        tensors = list(reader.tensors)
    except Exception as exc:
        raise ModelLoadError(f"{path}: GGUF metadata is corrupt ({type(exc).__name__}: {exc})") from exc
    names = {t.name for t in tensors}
    config = _config(fields, names, path)
    tokenizer = tokenizer_from_gguf(fields, path)
    config.eos_token_ids = tokenizer.eos_token_ids
    state_dict: dict[str, torch.Tensor] = {}
    for t in tensors:
        if t.name == "rope_freqs.weight":
            config.rope_freq_factors = tuple(float(x) for x in _dequantize(t, path).flatten())
            continue
        hf = _hf_name(t.name)
        if hf is None:
            raise ModelLoadError(f"{path}: unexpected tensor {t.name!r} for a Llama model")
        weight = _dequantize(t, path)
        if undo_rope_permutation and hf.endswith("q_proj.weight"):
            weight = unpermute_qk(weight, config.num_heads)
        elif undo_rope_permutation and hf.endswith("k_proj.weight"):
            weight = unpermute_qk(weight, config.num_kv_heads)
        state_dict[hf] = weight
    return GGUFContents(config=config, state_dict=state_dict, tokenizer=tokenizer)
