"""Swapping a decoder's projections for another weight format, fused where inputs are shared.

q, k and v read the same input, and so do gate and up: a format with a per-call cost of its
own (quantizing or converting the activation, packing, a kernel launch) pays it once per
shared input when their weights are concatenated into one projection (`qkv_proj`,
`gate_up_proj` on the model), as vLLM's `QKVParallelLinear` and `MergedColumnParallelLinear`
do. Concatenating rows is exact for any per-output-channel format.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

MakeProjection = Callable[[torch.Tensor], nn.Module]  # weight [out, in] -> a module computing x @ w.T


def replace_projections(model: nn.Module, make: MakeProjection) -> None:
    """Every decoder layer's projections as `make(weight)`: qkv, o, gate_up and down."""
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        attn.qkv_proj = make(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]))
        attn.o_proj = make(attn.o_proj.weight)
        mlp.gate_up_proj = make(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        mlp.down_proj = make(mlp.down_proj.weight)
        del attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj
