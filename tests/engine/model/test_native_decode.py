"""The native decode stack against the model's own forward: bit for bit the same hidden states
and the same KV cache writes, for every weight format it takes, at batch 1 (the one-sequence
attention path) and batch 3 (the per-head loop); which steps it accepts; that it is built and
used here; and what happens where it cannot be had."""

from __future__ import annotations

import logging

import pytest
import torch

from reference_engine.attention.backend import TorchAttentionBackend, TritonAttentionBackend
from reference_engine.attention.kv_cache import allocate_kv_caches
from reference_engine.config import EngineConfig
from reference_engine.engine_factory import build_engine
from reference_engine.model import load_model
from reference_engine.model import native_decode as nd
from reference_engine.model_runner import build_step_inputs
from reference_engine.request import Request
from reference_engine.sampling_params import SamplingParams
from reference_engine.scheduler_output import ScheduledChunk

BLOCK = 8


def test_the_library_builds_and_loads_on_this_machine():
    # scripts/setup.sh installs g++ and builds it; a silent fallback would cost a third of a
    # decode step without any test noticing.
    assert nd.load_library() is None
    assert nd.library_path().is_file()


def requests(lengths: list[int], vocab: int) -> list[Request]:
    gen = torch.Generator().manual_seed(sum(lengths))
    return [
        Request(f"r{i}", torch.randint(0, vocab, (n,), generator=gen).tolist(), n, SamplingParams(), 0.0)
        for i, n in enumerate(lengths)
    ]


def decode_step(loaded, kv_cache_dtype: str, lengths: list[int]):
    """Prefill `lengths` (Python path), then (meta, inputs, caches) for one decode token each."""
    c = loaded.config
    caches = allocate_kv_caches(
        c.num_layers, 32, BLOCK, c.num_kv_heads, c.head_dim, loaded.dtype, kv_cache_dtype=kv_cache_dtype
    )
    reqs = requests(lengths, c.vocab_size)
    tables, next_block = [], 1
    for r in reqs:
        need = (len(r.token_ids) + 1 + BLOCK - 1) // BLOCK
        tables.append(list(range(next_block, next_block + need)))
        next_block += need
    prefill = build_step_inputs(
        [ScheduledChunk(r, 0, len(r.token_ids), t, True) for r, t in zip(reqs, tables)], BLOCK, "cpu"
    )
    backend = TorchAttentionBackend()
    with torch.inference_mode():
        loaded.model(prefill.input_ids, prefill.positions, prefill.meta, caches, backend)
    for r in reqs:
        r.token_ids.append(7)
    step = build_step_inputs(
        [ScheduledChunk(r, len(r.token_ids) - 1, 1, t, True) for r, t in zip(reqs, tables)], BLOCK, "cpu"
    )
    return step, caches, backend


FORMATS = [
    ("float32", None),  # plain nn.Linear, q/k/v and gate/up apart
    ("float32", "fp16"),
    ("float32", "int8"),
    ("bfloat16", None),
]


@pytest.mark.parametrize("dtype,quantization", FORMATS)
@pytest.mark.parametrize("lengths", [[13], [5, 17, 9]])
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "float16"])
def test_native_stack_equals_the_model_forward_bit_for_bit(dtype, quantization, lengths, kv_cache_dtype):
    loaded = load_model("tiny-random", dtype, quantization=quantization)
    stack = nd.native_decode_stack(loaded.model)
    assert stack is not None
    step, caches, backend = decode_step(loaded, kv_cache_dtype, lengths)
    assert stack.applies(step.meta, caches, backend)
    twins = [type(c)(c.key.clone(), c.value.clone()) for c in caches]
    with torch.inference_mode():
        expected = loaded.model(step.input_ids, step.positions, step.meta, caches, backend)
        got = stack.forward(step.input_ids, step.positions, step.meta, twins)
    assert got.dtype == expected.dtype and torch.equal(got, expected)
    for mine, theirs in zip(twins, caches):
        assert torch.equal(mine.key, theirs.key) and torch.equal(mine.value, theirs.value)


def test_only_decode_steps_on_the_torch_backend_over_float_caches_are_taken():
    loaded = load_model("tiny-random")
    step, caches, backend = decode_step(loaded, "auto", [6, 9])
    assert nd.NativeDecodeStack.applies(step.meta, caches, backend)
    assert not nd.NativeDecodeStack.applies(step.meta, caches, TritonAttentionBackend())
    int8_step, int8_caches, _ = decode_step(loaded, "int8", [6, 9])
    assert not nd.NativeDecodeStack.applies(int8_step.meta, int8_caches, backend)
    r = requests([12], loaded.config.vocab_size)[0]
    prefill = build_step_inputs([ScheduledChunk(r, 0, 12, [1, 2], True)], BLOCK, "cpu")
    assert not nd.NativeDecodeStack.applies(prefill.meta, caches, backend)
    step.meta.slot_mapping[1] = -1  # a padding row: write_kv must skip it, which only Python does
    assert not nd.NativeDecodeStack.applies(step.meta, caches, backend)


def test_a_projection_without_a_native_form_keeps_the_python_path(caplog):
    class Scaled(torch.nn.Linear):
        pass

    loaded = load_model("tiny-random")
    layer = loaded.model.model.layers[1]
    layer.self_attn.o_proj = Scaled(4, 4, bias=False)
    with caplog.at_level(logging.WARNING, logger="kvscope.engine"):
        assert nd.native_decode_stack(loaded.model) is None
    assert "no native form for Scaled" in caplog.text


def test_a_failing_compile_says_why_and_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "false")
    target = tmp_path / "x" / "native_decode.so"
    with pytest.raises(nd.NativeBuildError, match="compiling native_decode.cpp failed"):
        nd.build(target)
    assert not target.exists() and [p.name for p in target.parent.iterdir()] == ["build.lock"]


def test_the_engine_uses_it_unless_eager_is_enforced_and_greedy_outputs_agree():
    prompts = [[5, 9, 11, 3], [8, 1, 2, 2, 7, 30, 4]]
    outputs = {}
    for eager in (False, True):
        config = EngineConfig(model="tiny-random", num_blocks=40, block_size=BLOCK, enforce_eager=eager)
        built = build_engine(config)
        assert (built.engine.executor.runner.native is None) is eager
        engine = built.engine
        for p in prompts:
            engine.add_request(p, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=2))
        got: dict[str, list] = {}
        while engine.has_unfinished():
            for o in engine.step():
                got.setdefault(o.request.request_id, []).extend(
                    (t, lp.logprob) for t, lp in zip(o.new_token_ids, o.new_logprobs)
                )
        assert sorted(len(v) for v in got.values()) == [12, 12]
        outputs[eager] = got
    assert outputs[False] == outputs[True]
