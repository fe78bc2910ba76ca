"""A seeded tiny random Llama with a byte tokenizer: the engine's no-download test model.

Weights are scaled so attention is far from uniform (q/k scores with std ~2): with the usual
0.02 init every position looks alike and a wrong position or slot would go unnoticed.
"""

from __future__ import annotations

import torch

from reference_engine.model.builtin import TINY_RANDOM_NAME
from reference_engine.model.config import ModelConfig
from reference_engine.model.tokenizer import Tokenizer, byte_tokenizer


def tiny_random_config() -> ModelConfig:
    """256 byte tokens + 4 specials; untied lm_head so the untied path is exercised too."""
    return ModelConfig(
        vocab_size=260,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        head_dim=16,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_ids=(256, 258),
        name=TINY_RANDOM_NAME,
    )


def tiny_random_state_dict(config: ModelConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """HF-named fp32 weights drawn from a private generator: same seed, same bits."""
    gen = torch.Generator().manual_seed(seed)

    def linear(out_features: int, in_features: int, gain: float = 1.0) -> torch.Tensor:
        return torch.randn(out_features, in_features, generator=gen) * (gain / in_features**0.5)

    def norm() -> torch.Tensor:
        return 1.0 + 0.1 * torch.randn(config.hidden_size, generator=gen)

    h, d = config.hidden_size, config.head_dim
    sd = {"model.embed_tokens.weight": torch.randn(config.vocab_size, h, generator=gen)}
    for i in range(config.num_layers):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = norm()
        sd[p + "self_attn.q_proj.weight"] = linear(config.num_heads * d, h, gain=2.0)
        sd[p + "self_attn.k_proj.weight"] = linear(config.num_kv_heads * d, h)
        sd[p + "self_attn.v_proj.weight"] = linear(config.num_kv_heads * d, h)
        sd[p + "self_attn.o_proj.weight"] = linear(h, config.num_heads * d)
        sd[p + "post_attention_layernorm.weight"] = norm()
        sd[p + "mlp.gate_proj.weight"] = linear(config.intermediate_size, h)
        sd[p + "mlp.up_proj.weight"] = linear(config.intermediate_size, h)
        sd[p + "mlp.down_proj.weight"] = linear(h, config.intermediate_size)
    sd["model.norm.weight"] = norm()
    if not config.tie_word_embeddings:
        sd["lm_head.weight"] = linear(config.vocab_size, h, gain=4.0)
    return sd


def tiny_random_tokenizer() -> Tokenizer:
    return byte_tokenizer()
