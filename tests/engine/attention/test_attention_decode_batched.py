"""The torch backend's batched decode path against the per-sequence specification
(`paged_attention`), for every KV format, block size and GQA ratio, with padding rows."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from reference_engine.attention.torch_backend import paged_attention, paged_decode_attention, write_kv
from tests.engine.attention.batches import make_batch, run_step


@dataclass(frozen=True)
class Backend:
    attend: object

    def write_kv(self, key, value, cache, slot_mapping):
        write_kv(key, value, cache, slot_mapping)

    def attention(self, query, cache, meta, scale):
        return self.attend(query, cache, meta, scale)


@pytest.mark.parametrize("group", [1, 3, 8])
@pytest.mark.parametrize("block_size", [8, 16, 64])
@pytest.mark.parametrize("kv_dtype", ["float32", "float16", "bfloat16", "fp8", "int8"])
def test_batched_decode_matches_one_sequence_at_a_time(kv_dtype, block_size, group):
    seqs = [(n - 1, 1) for n in (1, 23, block_size, 70, 2)]  # very different context lengths
    batch = make_batch(seqs, block_size, 2, group, 16, kv_dtype, num_pad=2)
    expected, _ = run_step(batch, Backend(paged_attention))
    actual, _ = run_step(batch, Backend(paged_decode_attention))
    assert actual.dtype == expected.dtype
    # The same fp32 arithmetic, summed in a different order: float32 agrees to rounding.
    tol = 1e-6 if kv_dtype == "float32" else 1e-2
    torch.testing.assert_close(actual.float(), expected.float(), atol=tol, rtol=tol)
    assert (actual[len(seqs) :] == 0).all()  # padding rows stay zero


@pytest.mark.parametrize("num_pad", [0, 2])
@pytest.mark.parametrize("group", [1, 3, 8])
@pytest.mark.parametrize("kv_dtype", ["float32", "bfloat16", "int8"])
def test_one_decoding_sequence_matches_the_specification(kv_dtype, group, num_pad):
    # One sequence takes its own path (all KV heads in one batched product).
    batch = make_batch([(40, 1)], 16, 2, group, 16, kv_dtype, num_pad=num_pad)
    expected, _ = run_step(batch, Backend(paged_attention))
    actual, _ = run_step(batch, Backend(paged_decode_attention))
    tol = 1e-6 if kv_dtype == "float32" else 1e-2
    torch.testing.assert_close(actual.float(), expected.float(), atol=tol, rtol=tol)
    assert (actual[1:] == 0).all()
