"""Triton kernels against the torch oracle, on CPU under TRITON_INTERPRET=1 (set in conftest.py).

Each case runs one batch end to end twice, once per path: write the cached context (an
earlier step), write this step's K/V, attend. The Triton path uses the write kernel and
the decode or prefill kernel; the torch path is `torch_backend`. Both read identical cache
bytes (the write kernel is bit-exact, tested below), so the remaining differences are
accumulation order and, for 16-bit queries, the rounding of the output. Tolerances per KV
format (the query dtype each format is paired with is `attention_batches.QUERY_DTYPE`):

  float32 (fp32 queries)  atol 1e-5, rtol 1e-5   fp32 accumulation order only
  float16 (fp16 queries)  atol 4e-3, rtol 4e-3   fp16 tl.dot operands + fp16 output (ulp 1e-3 at 1)
  bfloat16 (bf16 queries) atol 3e-2, rtol 1e-2   bf16 output rounding (ulp 7.8e-3 at 1; the
                                                 interpreter truncates where torch rounds)
  fp8 (fp16 queries)      as float16
  int8 (bf16 queries)     as bfloat16

Coverage, pruned to keep the interpreter (about 2 ms per program-iteration) to a few minutes:
* decode: the full cross-product KV format (5) x block size (8, 16, 64) x GQA ratio (1, 3, 8)
  with lengths 1, 23, block_size (exact multiple) and 70 plus a padding row, forced to 4 splits
  of 16-token tiles so the 1-token sequence leaves empty splits for the merge.
* prefill and chunked prefill: a pairwise covering of the same three factors (GQA ratio =
  (format index + block index) mod 3, so every pair of values occurs), 15 cases per scenario,
  alternating the default tiles with the smallest legal ones (16 x 16) below GQA 8.
  Chunked prefill mixes a block-aligned prefix hit, a chunk that resumes mid-block, a decode
  and a fresh prompt in one batch.
* the backend's own dispatch and heuristics, head_dim 80 (padded to 128 lanes), and padding.
Not covered here: int64 page offsets past 2**31 elements (a cache that large does not fit the
CI machine); the code path is the same, widened before the multiply.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from reference_engine.attention.backend import TorchAttentionBackend, TritonAttentionBackend
from reference_engine.attention.torch_backend import write_kv
from reference_engine.attention.triton_decode import paged_decode
from reference_engine.attention.triton_prefill import paged_prefill
from reference_engine.attention.triton_write import triton_write_kv
from tests.engine.attention.batches import PagedBatch, make_batch, run_step

KV_DTYPES = ["float32", "float16", "bfloat16", "fp8", "int8"]
BLOCK_SIZES = [8, 16, 64]
GQA_RATIOS = [1, 3, 8]
NUM_KV_HEADS = 2
HEAD_DIM = 16
TOL = {
    "float32": (1e-5, 1e-5),
    "float16": (4e-3, 4e-3),
    "bfloat16": (3e-2, 1e-2),
    "fp8": (4e-3, 4e-3),
    "int8": (3e-2, 1e-2),
}
TORCH = TorchAttentionBackend()


@dataclass(frozen=True)
class DecodeKernel:
    """The triton backend with the decode kernel's splits and tile forced."""

    num_splits: int
    block_n: int

    def write_kv(self, key, value, cache, slot_mapping):
        triton_write_kv(key, value, cache, slot_mapping)

    def attention(self, query, cache, meta, scale):
        return paged_decode(query, cache, meta, scale, num_splits=self.num_splits, block_n=self.block_n)


@dataclass(frozen=True)
class PrefillKernel:
    """The triton backend with the prefill kernel's tiles forced (None: the heuristics)."""

    block_m: int | None
    block_n: int | None

    def write_kv(self, key, value, cache, slot_mapping):
        triton_write_kv(key, value, cache, slot_mapping)

    def attention(self, query, cache, meta, scale):
        return paged_prefill(query, cache, meta, scale, block_m=self.block_m, block_n=self.block_n)


def assert_matches_torch(batch: PagedBatch, kernel) -> None:
    expected, _ = run_step(batch, TORCH)
    actual, _ = run_step(batch, kernel)
    atol, rtol = TOL[batch.kv_cache_dtype]
    torch.testing.assert_close(actual.float(), expected.float(), atol=atol, rtol=rtol)


def decode_seqs(block_size: int) -> list[tuple[int, int]]:
    return [(n - 1, 1) for n in (1, 23, block_size, 70)]


def prefill_seqs(block_size: int) -> list[tuple[int, int]]:
    return [(0, 1), (0, block_size), (0, 23), (0, 70)]


def chunked_seqs(block_size: int) -> list[tuple[int, int]]:
    return [(block_size, 6), (5, block_size), (40, 1), (0, 23)]


@pytest.mark.parametrize("group", GQA_RATIOS)
@pytest.mark.parametrize("block_size", BLOCK_SIZES)
@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_decode_matches_torch(kv_dtype, block_size, group):
    batch = make_batch(
        decode_seqs(block_size), block_size, NUM_KV_HEADS, group, HEAD_DIM, kv_dtype, num_pad=1
    )
    assert_matches_torch(batch, DecodeKernel(num_splits=4, block_n=16))


# The smallest tiles hold only 16 // 8 = 2 tokens at GQA 8, which the interpreter runs slowly.
PAIRWISE = [
    (kv_dtype, block_size, group, (16, 16) if (i + j) % 2 and group < 8 else (None, None))
    for i, kv_dtype in enumerate(KV_DTYPES)
    for j, block_size in enumerate(BLOCK_SIZES)
    for group in [GQA_RATIOS[(i + j) % 3]]
]


@pytest.mark.parametrize("scenario", [prefill_seqs, chunked_seqs], ids=["prefill", "chunked_prefix_hit"])
@pytest.mark.parametrize("kv_dtype,block_size,group,tiles", PAIRWISE)
def test_prefill_matches_torch(kv_dtype, block_size, group, tiles, scenario):
    batch = make_batch(scenario(block_size), block_size, NUM_KV_HEADS, group, HEAD_DIM, kv_dtype, num_pad=2)
    assert_matches_torch(batch, PrefillKernel(*tiles))


@pytest.mark.parametrize("scenario", [decode_seqs, chunked_seqs], ids=["decode", "mixed"])
def test_backend_dispatch_and_heuristics(scenario):
    batch = make_batch(scenario(16), 16, NUM_KV_HEADS, 4, 32, "float16")
    assert_matches_torch(batch, TritonAttentionBackend())


@pytest.mark.parametrize("kv_dtype", ["float32", "int8"])
def test_head_dim_80(kv_dtype):
    decode = make_batch(decode_seqs(16), 16, 1, 2, 80, kv_dtype)
    assert_matches_torch(decode, DecodeKernel(num_splits=2, block_n=32))
    chunked = make_batch(chunked_seqs(16), 16, 1, 2, 80, kv_dtype)
    assert_matches_torch(chunked, PrefillKernel(None, None))


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
def test_write_kernel_is_bit_exact(kv_dtype):
    batch = make_batch(chunked_seqs(8), 8, NUM_KV_HEADS, 1, 32, kv_dtype, num_pad=3)
    batch.key[-1] = 1e4  # a padding row: must be skipped, and must not sway fp8 calibration
    caches = []
    for write in (write_kv, triton_write_kv):
        cache = batch.new_cache()
        write(batch.prefix_key, batch.prefix_value, cache, batch.prefix_slots)
        write(batch.key, batch.value, cache, batch.meta.slot_mapping)
        caches.append(cache)
    torch_cache, triton_cache = caches
    for name in ("key", "value", "k_scale", "v_scale"):
        a, b = getattr(torch_cache, name), getattr(triton_cache, name)
        if a is None:
            assert b is None
            continue
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), name
    assert not triton_cache.key[0].float().any(), "the null block is never written"


def test_padding_rows_stay_zero():
    batch = make_batch(chunked_seqs(16), 16, NUM_KV_HEADS, 3, HEAD_DIM, "float32", num_pad=2)
    out, _ = run_step(batch, PrefillKernel(16, 16))
    assert not out[-2:].any()
    decode = make_batch(decode_seqs(16), 16, NUM_KV_HEADS, 3, HEAD_DIM, "float32", num_pad=2)
    out, _ = run_step(decode, DecodeKernel(num_splits=2, block_n=16))
    assert not out[-2:].any()
