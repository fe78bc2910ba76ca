"""The model and GPU catalogue: shapes from real config.json files, derived parameter counts
against published totals, the HF config reader and its errors, and import lightness."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from reference_engine.catalogue import (
    GPUS,
    MODELS,
    CatalogueError,
    get_gpu,
    get_model,
    kv_dtype_bytes,
    model_from_hf_config,
    resolve_model,
)

REQUIRED_MODELS = [
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "qwen2.5-14b",
    "qwen2.5-32b",
    "qwen2.5-72b",
    "qwen3-4b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "gpt-oss-120b",
    "gemma-3-27b",
    "smollm2-135m",
]
REQUIRED_GPUS = [
    "a10g",
    "l4",
    "a100-40gb",
    "a100-80gb",
    "h100-80gb",
    "h200-141gb",
    "b200",
    "mi300x",
    "rtx-4090",
]

# (layers, hidden, heads, kv heads, head_dim, max context) as in each model's config.json.
SHAPES = {
    "llama-3.1-8b": (32, 4096, 32, 8, 128, 131072),
    "llama-3.1-70b": (80, 8192, 64, 8, 128, 131072),
    "llama-3.1-405b": (126, 16384, 128, 8, 128, 131072),
    "qwen2.5-7b": (28, 3584, 28, 4, 128, 131072),
    "qwen3-4b": (36, 2560, 32, 8, 128, 40960),
    "qwen3-235b-a22b": (94, 4096, 64, 4, 128, 40960),
    "gpt-oss-120b": (36, 2880, 64, 8, 64, 131072),
    "gemma-3-27b": (62, 5376, 32, 16, 128, 131072),
    "smollm2-135m": (30, 576, 9, 3, 64, 8192),
}

# Published totals (model cards / HF safetensors metadata), in billions: (total, active).
# gpt-oss's 5.1B active excludes the 0.58B input embedding; Gemma 3's 27.4B includes a
# 0.4B vision tower the catalogue leaves out.
PUBLISHED = {
    "llama-3.1-8b": (8.03, None),
    "llama-3.1-70b": (70.6, None),
    "llama-3.1-405b": (405.9, None),
    "mistral-7b": (7.25, None),
    "mixtral-8x7b": (46.7, 12.9),
    "qwen2.5-7b": (7.61, None),
    "qwen2.5-14b": (14.7, None),
    "qwen2.5-32b": (32.5, None),
    "qwen2.5-72b": (72.7, None),
    "qwen3-4b": (4.02, None),
    "qwen3-8b": (8.19, None),
    "qwen3-32b": (32.8, None),
    "qwen3-30b-a3b": (30.5, 3.3),
    "qwen3-235b-a22b": (235, 22),
    "deepseek-v3": (671, 37),
    "gpt-oss-120b": (116.8, 5.1 + 0.58),
    "gemma-3-27b": (27.4 - 0.4, None),
    "smollm2-135m": (0.1345, None),
}


def test_every_required_model_and_gpu_is_catalogued():
    assert set(REQUIRED_MODELS) <= set(MODELS)
    assert set(REQUIRED_GPUS) <= set(GPUS)
    for name in REQUIRED_MODELS:
        assert MODELS[name].source, f"{name} must cite where its config came from"
    for name in REQUIRED_GPUS:
        assert GPUS[name].source


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_shapes_match_the_published_config(name):
    m = get_model(name)
    assert (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim, m.max_context) == SHAPES[
        name
    ]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_derived_parameter_counts_match_published_totals(name):
    m, (total, active) = get_model(name), PUBLISHED[name]
    assert m.total_params / 1e9 == pytest.approx(total, rel=0.02)
    assert m.active_params / 1e9 == pytest.approx(active or total, rel=0.03)
    assert m.is_moe == (active is not None)


def test_weight_bytes_follow_the_dtype():
    m = get_model("llama-3.1-70b")
    assert m.weight_bytes("bf16") == pytest.approx(141e9, rel=0.01)  # "~141 GB": does not fit one H100
    assert m.weight_bytes("fp8") * 2 == pytest.approx(m.weight_bytes("bf16"), abs=2)
    assert m.weight_bytes() == m.weight_bytes("bf16")
    assert get_model("deepseek-v3").weight_bytes() == get_model("deepseek-v3").weight_bytes("fp8")
    oss = get_model("gpt-oss-120b")  # experts in mxfp4, the rest in bf16: ~61 GiB, a single-H100 model
    assert 55 < oss.weight_bytes() / 2**30 < 66 and oss.weight_bytes() < oss.weight_bytes("fp8")
    with pytest.raises(CatalogueError, match="unknown weight dtype"):
        m.weight_bytes("fp7")


def test_attention_kinds():
    ds = get_model("deepseek-v3")
    assert (ds.attention, ds.kv_lora_rank, ds.qk_rope_head_dim) == ("mla", 512, 64)
    oss = get_model("gpt-oss-120b")
    assert (oss.attention, oss.sliding_window, oss.num_sliding_layers, oss.num_full_layers) == (
        "sliding",
        128,
        18,
        18,
    )
    gemma = get_model("gemma-3-27b")  # 5 local : 1 global
    assert (gemma.sliding_window, gemma.num_sliding_layers, gemma.num_full_layers) == (1024, 52, 10)
    assert get_model("mistral-7b-v0.1").num_sliding_layers == 32
    for name in ("qwen2.5-72b", "llama-3.1-8b", "mistral-7b", "qwen3-8b"):
        assert get_model(name).attention == "full" and get_model(name).sliding_window is None


def test_names_aliases_and_hf_ids_resolve():
    assert get_model("LLAMA-3.1-70B") is get_model("llama-3.3-70b") is get_model("meta-llama/Llama-3.1-70B")
    assert get_model("Qwen/Qwen3-4B").name == "qwen3-4b"
    assert get_model("deepseek-r1").name == "deepseek-v3"
    assert get_gpu("H100").name == "h100-80gb" and get_gpu("a100_80gb").name == "a100-80gb"


def test_unknown_names_list_the_known_ones():
    with pytest.raises(CatalogueError, match="unknown model 'llama-9'.*llama-3.1-70b.*qwen3-4b"):
        get_model("llama-9")
    with pytest.raises(CatalogueError, match="unknown GPU 'h1000'.*h100-80gb.*mi300x"):
        get_gpu("h1000")
    with pytest.raises(CatalogueError, match="unknown KV cache dtype"):
        kv_dtype_bytes("fp4")


def test_gpu_figures():
    h100 = get_gpu("h100-80gb")
    assert h100.bandwidth_bytes_per_s == 3.35e12 and h100.bf16_flops == 989e12 and h100.fp8_flops == 1979e12
    assert h100.peak_flops("fp8") == 1979e12 and h100.peak_flops("bf16") == 989e12
    assert get_gpu("a100-80gb").peak_flops("fp8") == 312e12  # no fp8 units on Ampere
    for gpu in GPUS.values():  # the runtime reports a little less than the marketed capacity
        assert 0.9 * gpu.marketed_memory_gb * 1e9 < gpu.memory_bytes < gpu.marketed_memory_gb * 2**30
        assert gpu.bandwidth_bytes_per_s > 1e11 and gpu.bf16_flops > 1e13


def test_catalogue_entries_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_model("qwen3-4b").num_layers = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        MODELS["x"] = MODELS["qwen3-4b"]  # type: ignore[index]


QWEN3_8B_VERBATIM = {  # the published config.json, verbatim (citsjtu2020/LLM-Prof:sglang/Model_Config.md)
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
    "max_window_layers": 36,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}


def _same_shapes(a, b):
    skip = {"name", "hf_id", "source"}
    return {k: v for k, v in dataclasses.asdict(a).items() if k not in skip} == {
        k: v for k, v in dataclasses.asdict(b).items() if k not in skip
    }


def test_a_real_config_json_file_and_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_8B_VERBATIM))
    from_file = model_from_hf_config(tmp_path / "config.json")
    from_dir = resolve_model(str(tmp_path))
    assert _same_shapes(from_file, get_model("qwen3-8b")) and _same_shapes(from_dir, get_model("qwen3-8b"))
    assert from_file.name == "qwen3" and from_dir.name == tmp_path.name


def test_mha_and_derived_head_dim_and_text_config():
    m = model_from_hf_config(
        {
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "vocab_size": 10,
            "max_position_embeddings": 128,
            "intermediate_size": 128,
        }
    )
    assert (m.num_kv_heads, m.head_dim) == (4, 16)  # no num_key_value_heads: plain multi-head attention
    wrapped = model_from_hf_config({"model_type": "llava", "text_config": {**QWEN3_8B_VERBATIM}})
    assert _same_shapes(wrapped, get_model("qwen3-8b"))


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"hidden_size": 64}', "missing num_hidden_layers"),
        (
            '{"num_hidden_layers": "32", "hidden_size": 64, "num_attention_heads": 4}',
            "num_hidden_layers must be a non-negative integer",
        ),
        ('{"num_hidden_layers": -1, "hidden_size": 64, "num_attention_heads": 4}', "non-negative integer"),
        (
            '{"num_hidden_layers": 2, "hidden_size": 65, "num_attention_heads": 4, "vocab_size": 9,'
            ' "max_position_embeddings": 8}',
            "does not divide",
        ),
        (
            '{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 9}',
            "missing max_position_embeddings",
        ),
        (
            '{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 9,'
            ' "max_position_embeddings": 8,'
            ' "num_local_experts": 4, "num_experts_per_tok": 8}',
            "num_experts_per_tok",
        ),
        (
            '{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 9,'
            ' "max_position_embeddings": 8,'
            ' "sliding_window": 4, "layer_types": ["full_attention"]}',
            "one entry per layer",
        ),
    ],
)
def test_malformed_config_json_is_a_clear_error(tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(CatalogueError, match=message) as info:
        model_from_hf_config(path)
    assert str(path) in str(info.value)


def test_missing_config_file():
    with pytest.raises(CatalogueError, match="cannot read"):
        model_from_hf_config("/nonexistent/config.json")


def test_tensor_parallel_rules():
    get_model("llama-3.1-70b").check_tensor_parallel(16)  # 8 KV heads replicated, 64 query heads split
    assert get_model("llama-3.1-70b").kv_heads_per_rank(16) == 1
    assert get_model("deepseek-v3").kv_heads_per_rank(8) == 1
    with pytest.raises(CatalogueError, match="9 attention heads"):
        get_model("smollm2-135m").check_tensor_parallel(2)
    with pytest.raises(CatalogueError, match=">= 1"):
        get_model("qwen3-4b").check_tensor_parallel(0)


def test_import_is_light():
    code = (
        "import sys, reference_engine.catalogue, reference_engine.sim.cost_model, harness.advisor.sizing; "
        "bad = {'torch', 'numpy', 'pandas'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
