"""Weight formats: what `--dtype auto` and `--quantization auto` pick from the CPU's flags, and
the weight-only int8 and fp16 projections against the float matmul they replace."""

from __future__ import annotations

import pytest
import torch

from reference_engine.config import ConfigError, EngineConfig
from reference_engine.engine_factory import build_engine
from reference_engine.model.fp16_linear import Fp16Linear
from reference_engine.model.int8_linear import Int8Linear, quantize_per_channel
from reference_engine.model.registry import load_model
from reference_engine.model_dtype import (
    cpu_flags,
    cpu_has_fp16_gemm,
    resolve_model_dtype,
    resolve_quantization,
)


def test_auto_is_fp16_weights_on_float32_on_a_cpu_with_fbgemms_fp16_gemm():
    avx2 = frozenset({"avx2", "fma", "f16c"})
    for flags in (avx2, avx2 | {"avx512_bf16", "amx_bf16"}):  # also where bf16 is native
        assert resolve_quantization("auto", "auto", "cpu", flags) == "fp16"
        assert resolve_model_dtype("auto", "cpu", flags) == "float32"
    # An explicit dtype is taken as asked: float32 is the exact path, one flag away.
    assert resolve_quantization("auto", "float32", "cpu", avx2) is None
    assert resolve_quantization("auto", "bfloat16", "cpu", avx2) is None
    # No AVX2 + F16C (fbgemm's fp16 GEMM does not run), or CUDA: no weight-only format.
    assert resolve_quantization("auto", "auto", "cpu", frozenset({"sse4_2"})) is None
    assert resolve_quantization("auto", "auto", "cuda:0", avx2) is None
    # Explicit formats pass through; none and None (what earlier runs recorded) are none.
    assert resolve_quantization("int8", "auto", "cpu", frozenset()) == "int8"
    assert resolve_quantization("none", "auto", "cpu", avx2) is None
    assert resolve_quantization(None, "auto", "cpu", avx2) is None


def test_auto_dtype_without_fp16_weights_is_bfloat16_only_with_native_bf16_matmul():
    avx2 = frozenset({"avx2", "fma", "f16c"})
    assert resolve_model_dtype("auto", "cpu", avx2, quantization="none") == "float32"
    assert resolve_model_dtype("auto", "cpu", avx2 | {"avx512_bf16"}, quantization="none") == "bfloat16"
    assert resolve_model_dtype("auto", "cpu", avx2 | {"amx_bf16"}, quantization="int8") == "bfloat16"
    assert resolve_model_dtype("auto", "cpu", frozenset({"amx_bf16"})) == "bfloat16"  # no fp16 GEMM
    assert resolve_model_dtype("auto", "cuda:0", avx2) == "bfloat16"
    assert resolve_model_dtype("float16", "cpu", avx2 | {"amx_bf16"}) == "float16"  # explicit wins


def test_the_default_engine_holds_fp16_weights_where_the_cpu_runs_fbgemms_fp16_gemm():
    built = build_engine(EngineConfig(model="tiny-random", num_blocks=16))
    if cpu_has_fp16_gemm():
        assert built.weights.startswith("float16 projections") and built.loaded.dtype_name == "float32"
    else:
        assert built.weights == resolve_model_dtype("auto", "cpu")
    exact = build_engine(EngineConfig(model="tiny-random", num_blocks=16, dtype="float32"))
    assert exact.weights == "float32"


def test_cpu_flags_reads_the_first_processor(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(str(info)) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()


def test_int8_per_channel_error_is_bounded_by_half_a_step_per_weight():
    torch.manual_seed(0)
    weight = torch.randn(96, 64) * torch.logspace(-3, 1, 96)[:, None]  # rows of very different scale
    weight[5] = 0.0  # an all-zero row must not divide by zero
    q, scales = quantize_per_channel(weight)
    assert q.dtype == torch.int8 and scales.shape == (96,) and int(q.abs().max()) <= 127
    dequantized = q.float() * scales.float()[:, None]
    step = weight.abs().amax(dim=1, keepdim=True) / 127
    # Half a quantization step, plus the bfloat16 rounding of the scale (2^-8 of the value).
    assert ((dequantized - weight).abs() <= step * 0.5 + weight.abs() * 2**-8 + 1e-12).all()
    assert (dequantized[5] == 0).all()
    x = torch.randn(7, 64)
    exact = x @ weight.t()
    out = Int8Linear(weight)(x)
    assert out.dtype == torch.float32 and out.shape == (7, 96)
    rel = (out - exact).norm() / exact.norm()
    assert rel < 0.02, rel  # int8 weights and bfloat16 activations: about 1% relative error


def fused_projections(loaded) -> list[torch.nn.Module]:
    """Every layer's qkv, o, gate_up and down projections, once the unfused ones are gone."""
    out = []
    for layer in loaded.model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        assert not any(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj"))
        assert not any(hasattr(mlp, n) for n in ("gate_proj", "up_proj"))
        out += [attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj]
    return out


def test_int8_model_replaces_every_projection_and_keeps_the_logits_head():
    loaded = load_model("tiny-random", "float32", quantization="int8")
    assert all(isinstance(proj, Int8Linear) for proj in fused_projections(loaded))
    assert loaded.dtype == torch.float32 and loaded.describe_weights().startswith("int8")
    assert loaded.model.model.embed_tokens.weight.dtype == torch.float32
    assert loaded.model.logits_head is None


def test_fp16_projection_rounds_only_the_weights_to_float16():
    torch.manual_seed(0)
    weight = torch.randn(96, 64) * torch.logspace(-3, 1, 96)[:, None]
    x = torch.randn(7, 64)
    linear = Fp16Linear(weight)
    out = linear(x)
    assert out.dtype == torch.float32 and out.shape == (7, 96)
    # Inputs off the flat float32 fast path: shape and dtype restored around the same kernel.
    assert torch.equal(linear(x.view(7, 1, 64)), out.view(7, 1, 96))
    assert linear(x.bfloat16()).dtype == torch.bfloat16
    # The same products on float16-rounded weights in float32: only summation order differs.
    rounded = x @ weight.half().float().t()
    assert torch.allclose(out, rounded, rtol=1e-4, atol=1e-5)
    exact = x @ weight.t()
    rel = (out - exact).norm() / exact.norm()
    assert 0 < rel < 2**-10, rel  # float16 keeps 11 significant bits of each weight
    assert torch.equal(Fp16Linear(weight)(x), out)  # the same weights, the same result
    with pytest.raises(ValueError, match="CPU"):
        Fp16Linear(weight.to("meta"))


def test_fp16_model_fuses_the_projections_and_holds_the_logits_head_apart():
    fp32 = load_model("tiny-random", "float32")
    loaded = load_model("tiny-random", "float32", quantization="fp16")
    assert all(isinstance(proj, Fp16Linear) for proj in fused_projections(loaded))
    assert isinstance(loaded.model.logits_head, Fp16Linear)
    assert loaded.describe_weights().startswith("float16 projections")
    hidden = torch.randn(3, fp32.config.hidden_size)
    exact, cheap = fp32.model.compute_logits(hidden), loaded.model.compute_logits(hidden)
    rel = (cheap - exact).norm() / exact.norm()
    assert cheap.dtype == torch.float32 and 0 < rel < 2**-9, rel
    with pytest.raises(ConfigError, match="CPU"):
        EngineConfig(model="tiny-random", quantization="fp16", device="cuda:0").validate()


def test_a_preloaded_model_must_match_the_asked_dtype():
    fp32 = load_model("tiny-random", "float32")
    assert build_engine(EngineConfig(model="tiny-random", num_blocks=16), fp32).weights == "float32"
    with pytest.raises(ConfigError, match="bfloat16"):
        build_engine(EngineConfig(model="tiny-random", num_blocks=16, dtype="bfloat16"), fp32)
    with pytest.raises(ConfigError, match="not quantized"):
        build_engine(EngineConfig(model="tiny-random", num_blocks=16, quantization="int8"), fp32)
