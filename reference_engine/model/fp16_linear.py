"""Weight-only float16 projections on the CPU: weights held in float16, computed by fbgemm's
fp16 GEMM (PyTorch's `quantized::linear_dynamic_fp16`, the kernel behind torch's dynamic fp16
quantization), with float32 activations and float32 accumulation.

Why: on an AVX2 CPU without native bf16 matmul this is the fast half-precision path. The
weights are converted to float32 inside the kernel (F16C), so a step reads half of float32's
weight bytes and nothing else changes: activations, norms, RoPE, attention and the KV cache
keep the model's dtype. Measured on SmolLM2-135M (`benchmarks/RESULTS.md`, "Weight dtypes"),
the projections and logits head run about 2x faster than float32 at batch 1 and 16, and
token logprobs move by about 0.001 nats (bfloat16 weights and activations: 0.05).

Numerics: each weight is rounded to float16 (11 significant bits), once, at load; products
and sums are float32. Unlike int8, the logits head is included: its 28M weights are a fifth
of the model's bytes, and float16 rounding leaves logprobs within the tolerance above.
"""

from __future__ import annotations

import torch
from torch import nn

from reference_engine.model.projections import replace_projections

KERNEL = "fbgemm fp16 GEMM, float32 activations"
# The overload itself: calling the packet (`torch.ops.quantized.linear_dynamic_fp16`) makes
# torch look, in Python, for fake script objects among the arguments on every call, which
# costs more than a batch-1 projection's own arithmetic on small shapes.
_LINEAR_FP16 = torch.ops.quantized.linear_dynamic_fp16.default


class Fp16Linear(nn.Module):
    """`y = x @ fp16(w).T` in float32, a drop-in for a bias-free `nn.Linear` on the CPU."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        if weight.device.type != "cpu":
            raise ValueError(f"fp16 weights run on the CPU (fbgemm), not {weight.device}")
        # fbgemm packs (and rounds) float32 weights itself; float16 ones are widened first.
        self._packed = torch.ops.quantized.linear_prepack_fp16(weight.float(), None)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]
        self.packed_bytes = weight.numel() * 2  # not a tensor of the module: bandwidth accounting reads it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2 and x.dtype == torch.float32:  # the engine's case: a flat fp32 batch
            return _LINEAR_FP16(x, self._packed)
        out = _LINEAR_FP16(x.reshape(-1, self.in_features).float(), self._packed)
        return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


def quantize_model_fp16(model: nn.Module) -> None:
    """The decoder's projections (q/k/v and gate/up fused) and the logits head as `Fp16Linear`."""
    replace_projections(model, Fp16Linear)
    head = model.model.embed_tokens.weight if model.config.tie_word_embeddings else model.lm_head.weight
    model.logits_head = Fp16Linear(head)
