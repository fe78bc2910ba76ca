"""The shape of a Llama-family model: what the forward pass, KV sizing and loaders share.

Torch-free on purpose, so sizing and the CLI can read a model's shape without torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ModelConfig:
    """Hyper-parameters of a Llama-family decoder.

    Invariants: `num_heads % num_kv_heads == 0` (GQA groups are whole) and `head_dim` is
    even (RoPE rotates pairs). `head_dim` is stored, not derived, because some models
    (Gemma, some Llama variants) decouple it from `hidden_size // num_heads`.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    # HF `rope_scaling` ({"rope_type": "linear" | "llama3", ...}); None: plain RoPE.
    rope_scaling: dict | None = None
    # Per-frequency divisors (GGUF `rope_freqs.weight`, llama3-style scaling baked in).
    rope_freq_factors: tuple[float, ...] | None = None
    name: str = "llama"

    def validate(self) -> None:
        from reference_engine.model.errors import ModelLoadError

        if self.num_heads % self.num_kv_heads:
            raise ModelLoadError(
                f"{self.name}: num_heads {self.num_heads} is not a multiple of num_kv_heads "
                f"{self.num_kv_heads}"
            )
        if self.head_dim % 2:
            raise ModelLoadError(f"{self.name}: head_dim {self.head_dim} must be even for RoPE")
        if self.rope_freq_factors is not None and len(self.rope_freq_factors) != self.head_dim // 2:
            raise ModelLoadError(
                f"{self.name}: rope_freqs has {len(self.rope_freq_factors)} entries, expected "
                f"{self.head_dim // 2}"
            )
