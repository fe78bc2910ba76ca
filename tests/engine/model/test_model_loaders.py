"""Model sources: GGUF (real SmolLM2 and a tiny file written here the way llama.cpp's
converter writes it), Hugging Face folders, the registry's names and errors, the tokenizer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from reference_engine.attention.kv_cache import allocate_kv_caches
from reference_engine.detokenizer import IncrementalDetokenizer
from reference_engine.model import ModelLoadError, load_model
from reference_engine.model.builtin import smollm2_gguf_path
from reference_engine.model.gguf_loader import load_gguf, unpermute_qk
from reference_engine.model.registry import LoadedModel
from reference_engine.model.tokenizer import BYTE_SPECIAL_TOKENS, CHATML_TEMPLATE, bytes_to_unicode
from reference_engine.model_runner import ModelRunner
from reference_engine.request import Request
from reference_engine.sampling_params import SamplingParams
from reference_engine.scheduler_output import ScheduledChunk, SchedulerOutput


def converter_permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf.py's LlamaModel.permute, restated as the spec to invert."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def last_logits(loaded: LoadedModel, ids: list[int]) -> torch.Tensor:
    c = loaded.config
    caches = allocate_kv_caches(c.num_layers, 8, 16, c.num_kv_heads, c.head_dim, torch.float32)
    req = Request("r", list(ids), len(ids), SamplingParams(), 0.0)
    out = ModelRunner(loaded, caches, 16).execute(
        SchedulerOutput([ScheduledChunk(req, 0, len(ids), [1, 2, 3], True)])
    )
    return out.sample_logits[0]


@pytest.fixture(scope="module")
def smol_tokenizer():
    import gguf

    from reference_engine.model.tokenizer import tokenizer_from_gguf

    reader = gguf.GGUFReader(smollm2_gguf_path())
    return tokenizer_from_gguf({k: f.contents() for k, f in reader.fields.items()}, "smollm2")


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return load_model("tiny-random")


# --- errors -------------------------------------------------------------------------------


def test_unknown_name_lists_valid_names():
    with pytest.raises(ModelLoadError, match="unknown model 'gpt-17'.*smollm2-135m, tiny-random"):
        load_model("gpt-17")


def test_missing_file(tmp_path):
    missing = str(tmp_path / "nope.gguf")
    with pytest.raises(ModelLoadError, match="nope.gguf: no such file"):
        load_model(missing)
    with pytest.raises(ModelLoadError, match="nope.gguf: GGUF file not found"):
        load_gguf(missing)


@pytest.mark.parametrize(
    ("cut", "problem"),
    [(0, "not a GGUF file"), (4096, "corrupt or truncated"), (-1000, "corrupt or truncated")],
)
def test_corrupt_gguf(tmp_path, cut, problem):
    path = tmp_path / "bad.gguf"
    if cut == 0:
        path.write_bytes(b"\x00garbage" + os.urandom(4096))
    else:  # the real file cut short: inside the metadata, or inside the tensor data
        with open(smollm2_gguf_path(), "rb") as f:
            data = f.read()
        path.write_bytes(data[:cut])
    with pytest.raises(ModelLoadError, match=f"bad.gguf: {problem}"):
        load_model(str(path))


def test_hf_folder_without_config(tmp_path):
    with pytest.raises(ModelLoadError, match="not a Hugging Face model folder \\(no config.json\\)"):
        load_model(str(tmp_path))


def test_bad_dtype():
    with pytest.raises(ModelLoadError, match="unsupported model dtype 'int3'"):
        load_model("tiny-random", dtype="int3")


def test_package_import_is_torch_free():
    code = (
        "import sys, reference_engine.model, reference_engine.model.registry\n"
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- GGUF ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("rows_heads", "kv"), [(9, None), (9, 3), (4, 2)])
def test_unpermute_inverts_the_converter(rows_heads, kv):
    heads = kv or rows_heads
    w = np.random.default_rng(0).standard_normal((heads * 8, 5)).astype(np.float32)
    permuted = converter_permute(w, rows_heads, kv)
    assert not np.array_equal(permuted, w)
    assert np.array_equal(unpermute_qk(torch.from_numpy(permuted), heads).numpy(), w)


def write_tiny_gguf(path: str, loaded: LoadedModel) -> None:
    """Write tiny-random as convert_hf_to_gguf.py would: llama.* keys, permuted Q/K,
    byte-level BPE tokenizer metadata."""
    import gguf

    c = loaded.config
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-gguf")
    w.add_block_count(c.num_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_heads)
    w.add_head_count_kv(c.num_kv_heads)
    w.add_rope_freq_base(c.rope_theta)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    tokens = [bytes_to_unicode()[b] for b in range(256)] + list(BYTE_SPECIAL_TOKENS)
    w.add_token_list(tokens)
    w.add_token_types([1] * 256 + [3] * len(BYTE_SPECIAL_TOKENS))
    w.add_token_merges([])
    w.add_eos_token_id(258)
    w.add_chat_template(CHATML_TEMPLATE)
    names = {
        "input_layernorm": "attn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "post_attention_layernorm": "ffn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for key, tensor in loaded.model.state_dict().items():
        array = tensor.numpy().copy()
        if key.startswith("model.layers."):
            layer, rest = key.removeprefix("model.layers.").split(".", 1)
            module, suffix = rest.rsplit(".", 1)
            if module == "self_attn.q_proj":
                array = converter_permute(array, c.num_heads, c.num_heads)
            elif module == "self_attn.k_proj":
                array = converter_permute(array, c.num_heads, c.num_kv_heads)
            w.add_tensor(f"blk.{layer}.{names[module]}.{suffix}", array)
        else:
            top = {
                "model.embed_tokens.weight": "token_embd.weight",
                "model.norm.weight": "output_norm.weight",
                "lm_head.weight": "output.weight",
            }[key]
            w.add_tensor(top, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_round_trip_gives_the_same_model(tmp_path, tiny):
    path = str(tmp_path / "tiny.gguf")
    write_tiny_gguf(path, tiny)
    loaded = load_model(path)
    assert loaded.source == path and loaded.config.name == "tiny-gguf"
    assert (loaded.config.num_heads, loaded.config.num_kv_heads, loaded.config.head_dim) == (4, 2, 16)
    assert not loaded.config.tie_word_embeddings
    assert 258 in loaded.tokenizer.eos_token_ids and 256 in loaded.tokenizer.eos_token_ids
    ids = tiny.tokenizer.encode("héllo, paged world")
    assert loaded.tokenizer.encode("héllo, paged world") == ids
    assert torch.allclose(last_logits(loaded, ids), last_logits(tiny, ids), atol=1e-5)


@pytest.mark.slow
def test_smollm2_config_from_gguf():
    contents = load_gguf(smollm2_gguf_path())
    c = contents.config
    assert (c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim) == (30, 576, 9, 3, 64)
    assert c.tie_word_embeddings and c.rope_theta == 100000.0 and c.vocab_size == 49152
    assert contents.state_dict["model.layers.0.self_attn.k_proj.weight"].shape == (192, 576)
    assert contents.state_dict["model.layers.0.mlp.down_proj.weight"].shape == (576, 1536)


# --- Hugging Face folder ------------------------------------------------------------------


def test_hf_folder_round_trip(tmp_path, tiny):
    from safetensors.torch import save_file

    c = tiny.config
    config = {
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "rope_theta": c.rope_theta,
        "rms_norm_eps": c.rms_norm_eps,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "eos_token_id": 258,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": CHATML_TEMPLATE, "eos_token": "<|endoftext|>"})
    )
    save_file(
        {k: v.contiguous() for k, v in tiny.model.state_dict().items()}, str(tmp_path / "model.safetensors")
    )
    tiny.tokenizer.backend.save(str(tmp_path / "tokenizer.json"))
    loaded = load_model(str(tmp_path))
    assert set(loaded.tokenizer.eos_token_ids) == {256, 258}
    ids = loaded.tokenizer.encode("abc")
    assert ids == [97, 98, 99]
    assert torch.allclose(last_logits(loaded, ids), last_logits(tiny, ids), atol=1e-6)
    assert loaded.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}]).endswith(
        "<|im_start|>assistant\n"
    )


# --- tokenizer ----------------------------------------------------------------------------

TEXTS = [
    "The capital of France is Paris.",
    "  leading spaces,\ttabs\nand newlines\n\n",
    "Prices: 1234.50 €, 3x faster!",
    "naïve café — 日本語 🚀",
    "<|im_start|>user\nhello<|im_end|>",
]


@pytest.mark.parametrize("text", TEXTS)
def test_smollm2_tokenizer_round_trip(smol_tokenizer, text):
    ids = smol_tokenizer.encode(text)
    assert smol_tokenizer.decode(ids, skip_special_tokens=False) == text


def test_smollm2_special_tokens(smol_tokenizer):
    tok = smol_tokenizer
    assert tok.encode("<|im_start|>user") == [1, tok.encode("user")[0]]
    assert tok.encode("2024") == [tok.token_to_id(d) for d in "2024"]  # digits split one by one
    assert tok.decode([1, *tok.encode("hi"), 2]) == "hi"
    assert tok.eos_token_ids == (2, 0) and tok.bos_token_id == 1 and not tok.add_bos


def test_smollm2_chat_template(smol_tokenizer):
    text = smol_tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}])
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = smol_tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=False, tokenize=True
    )
    assert ids[0] == 1 and ids[-2:] == [2, smol_tokenizer.token_to_id("Ċ")]


def test_incremental_detokenizer_streams_whole_characters(smol_tokenizer):
    text = " naïve café — 日本語 🚀 done"
    detok = IncrementalDetokenizer(smol_tokenizer.decode)
    deltas = []
    for token in smol_tokenizer.encode(text, add_special_tokens=False):
        detok.add([token])
        deltas.append(detok.take(final=False))
    assert "".join(deltas) == detok.text == text
    assert all("\ufffd" not in d for d in deltas)
