"""Weight-only int8 projections: one symmetric scale per output channel, PyTorch's int8
weight-pack matmul (`aten._weight_int8pack_mm`, the kernel torchao's int8 weight-only
scheme uses on CPU and CUDA).

Why this scheme: a quarter of float32's weight bytes, and what the engine computes for one
request does not depend on what else is in the batch (activations are never quantized,
unlike dynamic int8 schemes whose activation scale spans the whole batch).

Numerics: w ~= q * s with q = round(w / s) in [-127, 127], s = max|w_row| / 127. The kernel
takes activations and scales in bfloat16 (its fast CPU path; float32 inputs take a path
several times slower), returns bfloat16, and accumulates in float32. So each projection's
input and output are rounded to bfloat16; the model around it keeps its own dtype.
"""

from __future__ import annotations

import torch
from torch import nn

from reference_engine.model.projections import replace_projections

INT8_MAX = 127
KERNEL_DTYPE = torch.bfloat16


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 [out, in], scales [out] in the kernel dtype) for a float `weight` [out, in]."""
    w = weight.float()
    scales = (w.abs().amax(dim=1) / INT8_MAX).clamp_min(torch.finfo(torch.float32).tiny)
    q = torch.round(w / scales[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q.contiguous(), scales.to(KERNEL_DTYPE)


class Int8Linear(nn.Module):
    """`y = x @ (q * s).T`, a drop-in for a bias-free `nn.Linear`."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        q, scales = quantize_per_channel(weight)
        self.register_buffer("qweight", q)
        self.register_buffer("scales", scales)
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).to(KERNEL_DTYPE)
        out = torch.ops.aten._weight_int8pack_mm(flat, self.qweight, self.scales)
        return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


def quantize_model_int8(model: nn.Module) -> None:
    """Every projection of the decoder layers as an `Int8Linear` (q/k/v and gate/up fused:
    `reference_engine.model.projections`).

    The logits head (SmolLM2's tied embedding) stays in the model's dtype, as vLLM's weight
    quantization methods leave lm_head alone: the kernel's output is bfloat16, and logits
    rounded to 8 mantissa bits would blur the logprobs that scoring and sampling read.
    """
    replace_projections(model, Int8Linear)
