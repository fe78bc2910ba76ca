"""Llama-family decoder in torch: RMSNorm, RoPE, GQA attention over a paged KV cache, SwiGLU.

Module and parameter names follow Hugging Face's `LlamaForCausalLM`, so an HF state dict
loads as is and every loader converts *to* HF layout (Q/K rows in HF's rotate-half order).

The forward pass takes a flat batch (`T` tokens from any mix of prefill chunks and decode
steps) and never sees requests: positions, the KV slots and the attention context all come
from `AttentionMetadata`, built by the model runner.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from reference_engine.attention.backend import AttentionBackend, TorchAttentionBackend
from reference_engine.attention.kv_cache import LayerKVCache
from reference_engine.attention.metadata import AttentionMetadata
from reference_engine.model.config import ModelConfig
from reference_engine.model.errors import ModelLoadError

__all__ = ["LlamaForCausalLM", "ModelConfig", "apply_rope", "build_model", "rope_inv_freq"]


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """Rotary frequencies `[head_dim // 2]` in fp32 on the CPU, with the model's RoPE scaling
    applied. (Explicitly on the CPU: under a meta-device context, as in `build_model`, these
    ops would go through torch's Python reference kernels, whose import costs seconds.)"""
    d = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64, device="cpu") / d))
    scaling = config.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "linear":
        inv_freq = inv_freq / float(scaling["factor"])
    elif kind == "llama3":
        # Llama 3.1's scaling: slow (long-wavelength) frequencies are divided by `factor`,
        # fast ones kept, and the band between is interpolated smoothly.
        factor, low, high = (
            float(scaling["factor"]),
            float(scaling["low_freq_factor"]),
            float(scaling["high_freq_factor"]),
        )
        old_len = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        inv_freq = torch.where(medium, smoothed, scaled)
    elif kind != "default":
        raise ModelLoadError(
            f"{config.name}: unsupported rope_scaling type {kind!r} (supported: linear, llama3)"
        )
    if config.rope_freq_factors is not None:
        inv_freq = inv_freq / torch.tensor(config.rope_freq_factors, dtype=torch.float64, device="cpu")
    return inv_freq.float()


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin `[T, head_dim]` in fp32; each frequency appears twice (halves), HF's layout."""
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate `x` `[T, heads, head_dim]`: dim i pairs with dim i + head_dim/2 ("rotate_half").

    Computed in fp32 because bf16/fp16 angles lose the low bits that distinguish far positions.
    """
    xf = x.float()
    half = xf.shape[-1] // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos[:, None, :] + rotated * sin[:, None, :]).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32, then scale in the model dtype, as HF does (matches its numerics).
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            config.num_heads,
            config.num_kv_heads,
            config.head_dim,
        )
        self.scale = self.head_dim**-0.5
        h = config.hidden_size
        self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=False)
        # One projection for q, k and v together, when a weight format fuses them (int8:
        # one activation quantization and one kernel call instead of three).
        self.qkv_proj: nn.Module | None = None

    def rotated_qkv(self, x: torch.Tensor, cos, sin) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q and k with RoPE applied, and v, as `[T, heads, head_dim]` each.

        With a fused projection, q and k are rotated in one call over their adjacent heads
        (RoPE acts on each head alone, so this is exactly two calls' result): at batch 1 a
        decode step is bound by per-op overhead, and this is 5 ops fewer per layer."""
        t, h, kvh, d = x.shape[0], self.num_heads, self.num_kv_heads, self.head_dim
        if self.qkv_proj is None:
            q = apply_rope(self.q_proj(x).reshape(t, h, d), cos, sin)
            k = apply_rope(self.k_proj(x).reshape(t, kvh, d), cos, sin)
            return q, k, self.v_proj(x).reshape(t, kvh, d)
        qkv = self.qkv_proj(x).view(t, h + 2 * kvh, d)
        q, k = apply_rope(qkv[:, : h + kvh], cos, sin).split((h, kvh), dim=1)
        return q, k, qkv[:, h + kvh :]

    def forward(self, x, cos, sin, cache: LayerKVCache, meta: AttentionMetadata, backend: AttentionBackend):
        t = x.shape[0]
        q, k, v = self.rotated_qkv(x, cos, sin)
        # Write first: this step's own keys are part of the context its queries attend to.
        backend.write_kv(k, v, cache, meta.slot_mapping)
        out = backend.attention(q, cache, meta, self.scale)
        return self.o_proj(out.reshape(t, self.num_heads * self.head_dim).to(x.dtype))


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.gate_up_proj: nn.Module | None = None  # gate and up fused, as qkv_proj above

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_proj is None:
            gate, up = self.gate_proj(x), self.up_proj(x)
        else:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(nn.functional.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(self, x, cos, sin, cache, meta, backend):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, meta, backend)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        # An uninitialised weight: every weight is assigned from a checkpoint (build_model), and
        # a random init on the meta device costs seconds (it imports torch._dynamo).
        self.embed_tokens = nn.Embedding(
            config.vocab_size, config.hidden_size, _weight=torch.empty(config.vocab_size, config.hidden_size)
        )
        self.layers = nn.ModuleList(LlamaDecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """`forward` returns final-norm hidden states `[T, hidden]`; `compute_logits` projects
    only the rows the caller needs, because `[T, vocab]` for a long prefill is the largest
    tensor of a step and most of it is never sampled."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(config), persistent=False)
        # The logits projection, when a weight format holds it apart from the embedding.
        self.logits_head: nn.Module | None = None

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        kv_caches: list[LayerKVCache],
        backend: AttentionBackend | None = None,
    ) -> torch.Tensor:
        x, cos, sin = self.layer_inputs(input_ids, positions, kv_caches)
        backend = backend or TorchAttentionBackend()
        for layer, cache in zip(self.model.layers, kv_caches, strict=True):
            x = layer(x, cos, sin, cache, meta, backend)
        return self.model.norm(x)

    def layer_inputs(
        self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list[LayerKVCache]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """What the first layer takes: the embedded tokens and RoPE's cos and sin at `positions`
        (after checking there is one KV cache per layer)."""
        if len(kv_caches) != len(self.model.layers):
            raise ValueError(f"expected {len(self.model.layers)} KV caches, got {len(kv_caches)}")
        cos, sin = rope_cos_sin(positions, self.inv_freq)
        return self.model.embed_tokens(input_ids), cos, sin

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits `[N, vocab]` in fp32 (sampling and logprobs want full precision)."""
        if self.logits_head is not None:
            return self.logits_head(hidden).float()
        weight = self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight
        return (hidden @ weight.t()).float()


def build_model(
    config: ModelConfig,
    state_dict: dict[str, torch.Tensor],
    dtype: torch.dtype,
    device: str | torch.device,
    source: str = "",
) -> LlamaForCausalLM:
    """A model in eval mode holding exactly `state_dict` (HF names and layout).

    Built on the meta device and assigned, so no time or memory goes to a random init that
    would be overwritten. Missing, unexpected or mis-shaped tensors raise ModelLoadError.
    """
    config.validate()
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    tensors = {k: v.to(device=device, dtype=dtype) for k, v in state_dict.items()}
    try:
        model.load_state_dict(tensors, strict=True, assign=True)
    except RuntimeError as exc:
        raise ModelLoadError(f"{source or config.name}: weights do not match a Llama model: {exc}") from exc
    # The buffer was created on meta; recompute it where the weights live.
    model.inv_freq = rope_inv_freq(config).to(device)
    return model.eval().requires_grad_(False)
