"""GPU benchmark of the Triton attention kernels: decode bandwidth, paging overhead, fp8, prefill.

Usage:
  python benchmarks/kernels_gpu.py [--out kernels.md]   on a CUDA machine
  python benchmarks/kernels_gpu.py --smoke              tiny shapes; on CPU through TRITON_INTERPRET=1,
                                                        to check that the script runs (timings mean nothing)
Without CUDA and without --smoke it says so and exits 0.

Definitions (FlashInfer's): decode bandwidth = (K and V bytes of the whole context + Q + O
bytes) / kernel time, compared with a device-to-device copy measured here (read + write
bytes / time). The paging overhead is the latency of the paged kernel / that of
`F.scaled_dot_product_attention` on the same K/V stored contiguously. Prefill FLOPs count
the causal half: 4 * heads * head_dim * len * (len + 1) / 2 per sequence. One attention
layer of Llama-3-8B shape (32 query heads, 8 KV heads, head_dim 128, fp16), block tables
shuffled so that pages are scattered as in a long-running server. On CUDA, times are
`triton.testing.do_bench` medians with the L2 flushed between runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

TARGET_DECODE_BW = 0.70  # of copy bandwidth, at batch 64, context 4096
TARGET_PAGED_RATIO = 1.2  # paged / contiguous latency
TARGET_FP8_SPEEDUP = 1.5  # fp16 / fp8 decode latency at context 16384


@dataclass(frozen=True, slots=True)
class Plan:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    block_sizes: tuple[int, ...]
    fp8_context: int
    fp8_batches: tuple[int, ...]
    prefill: tuple[tuple[int, int], ...]  # (batch, length)
    copy_bytes: int


GPU_PLAN = Plan(
    32,
    8,
    128,
    (1, 16, 64, 256),
    (512, 4096, 16384),
    (16, 64),
    16384,
    (16, 64),
    ((16, 1024), (4, 4096), (1, 16384)),
    1 << 30,
)
SMOKE_PLAN = Plan(4, 2, 16, (1, 2), (24, 64), (16,), 64, (2,), ((2, 32),), 1 << 20)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, runnable under TRITON_INTERPRET=1")
    ap.add_argument("--out", help="also write the markdown report to this file")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        if not args.smoke:
            print(
                "kernels_gpu: no CUDA device here, nothing to measure (run with --smoke to check the script)."
            )
            return 0
        if "triton" not in sys.modules:  # the interpreter is chosen when triton is imported
            os.environ.setdefault("TRITON_INTERPRET", "1")
    report = Bench(
        SMOKE_PLAN if args.smoke else GPU_PLAN,
        "cuda" if torch.cuda.is_available() else "cpu",
        smoke=args.smoke,
    ).run()
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")
    return 0


class Bench:
    def __init__(self, plan: Plan, device: str, smoke: bool):
        import torch

        from reference_engine.attention.backend import TritonAttentionBackend

        self.torch, self.plan, self.device, self.smoke = torch, plan, device, smoke
        self.backend = TritonAttentionBackend()
        self.dtype = torch.float16
        self.gen = torch.Generator(device=device).manual_seed(0)
        self.results: dict[tuple, object] = {}

    def time(self, fn: Callable[[], object]) -> float:
        """Seconds per call."""
        if self.device == "cuda":
            import triton.testing

            return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") / 1e3
        fn()
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    def free_bytes(self) -> int:
        if self.device == "cuda":
            return self.torch.cuda.mem_get_info()[0]
        return 1 << 34

    def copy_bandwidth(self) -> float:
        src = self.torch.empty(self.plan.copy_bytes, dtype=self.torch.uint8, device=self.device)
        dst = self.torch.empty_like(src)
        return 2 * src.nbytes / self.time(lambda: dst.copy_(src))

    def batch(self, batch: int, length: int, query_len: int, block_size: int, kv_cache_dtype: str):
        """A filled single-layer cache holding `batch` sequences of `length` tokens, the metadata
        and a query."""
        torch, p = self.torch, self.plan
        from reference_engine.attention.kv_cache import allocate_kv_caches
        from reference_engine.attention.metadata import AttentionMetadata

        per_seq = -(-length // block_size)
        cache = allocate_kv_caches(
            1,
            batch * per_seq + 1,
            block_size,
            p.num_kv_heads,
            p.head_dim,
            self.dtype,
            self.device,
            kv_cache_dtype,
        )[0]
        for data in (cache.key, cache.value):
            for chunk in data[1:].split(4096):  # bounded temporaries on multi-GB caches
                x = torch.randn(chunk.shape, generator=self.gen, dtype=self.dtype, device=self.device)
                if kv_cache_dtype == "int8":
                    x = x.mul_(32).clamp_(-127, 127).round_()
                chunk.copy_(x.to(data.dtype))
        if kv_cache_dtype == "int8":
            cache.k_scale.fill_(1 / 32)
            cache.v_scale.fill_(1 / 32)
        order = torch.randperm(batch * per_seq, generator=self.gen, device=self.device) + 1
        tables = order.to(torch.int32).reshape(batch, per_seq)
        ones = torch.full((batch,), query_len, dtype=torch.int32, device=self.device)
        meta = AttentionMetadata(
            slot_mapping=torch.full((batch * query_len,), -1, dtype=torch.int64, device=self.device),
            block_tables=tables,
            seq_lens=torch.full_like(ones, length),
            query_start_loc=torch.cat([ones.new_zeros(1), ones.cumsum(0, dtype=torch.int32)]),
            max_query_len=query_len,
            max_seq_len=length,
            seq_lens_host=[length] * batch,
            query_lens_host=[query_len] * batch,
        )
        query = torch.randn(
            batch * query_len,
            p.num_heads,
            p.head_dim,
            generator=self.gen,
            dtype=self.dtype,
            device=self.device,
        )
        return cache, meta, query

    def contiguous_kv(self, cache, meta, length: int):
        """K and V gathered to `[batch, kv_heads, length, head_dim]` (what SDPA reads)."""
        out = []
        for data in (cache.key, cache.value):
            pages = data[meta.block_tables.long()]  # [B, blocks, block, KVH, D]
            out.append(pages.flatten(1, 2)[:, :length].transpose(1, 2).contiguous())
        return out

    @staticmethod
    def max_diff(actual, expected) -> float:
        """Largest |difference| to SDPA: a correctness check of the kernels on the real device."""
        return (actual.float() - expected.float()).abs().max().item()

    def paged(self, q, cache, meta) -> Callable[[], object]:
        scale = self.plan.head_dim**-0.5
        return lambda: self.backend.attention(q, cache, meta, scale)

    def sdpa(self, q, k, v, causal: bool) -> Callable[[], object]:
        import torch.nn.functional as F

        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    def decode_rows(self, copy_bw: float) -> list[str]:
        p, rows = self.plan, []
        for block_size in p.block_sizes:
            for batch in p.batches:
                for ctx in p.contexts:
                    kv_bytes = 2 * batch * ctx * p.num_kv_heads * p.head_dim * 2
                    if 3.2 * kv_bytes > self.free_bytes():  # paged + gathered + contiguous copies
                        rows.append(f"| {block_size} | {batch} | {ctx} | skipped: exceeds memory | | | | | |")
                        continue
                    cache, meta, q = self.batch(batch, ctx, 1, block_size, "auto")
                    t_paged = self.time(self.paged(q, cache, meta))
                    k, v = self.contiguous_kv(cache, meta, ctx)
                    q4 = q.view(batch, p.num_heads, 1, p.head_dim)
                    t_contig = self.time(self.sdpa(q4, k, v, causal=False))
                    err = self.max_diff(
                        self.paged(q, cache, meta)(), self.sdpa(q4, k, v, causal=False)().squeeze(2)
                    )
                    moved = kv_bytes + 2 * q.nbytes
                    bw = moved / t_paged
                    rows.append(
                        f"| {block_size} | {batch} | {ctx} | {t_paged * 1e6:.1f} | {bw / 1e9:.0f} | "
                        f"{bw / copy_bw:.0%} | {t_contig * 1e6:.1f} | {t_paged / t_contig:.2f} | {err:.1e} |"
                    )
                    self.results[(block_size, batch, ctx)] = (bw / copy_bw, t_paged / t_contig)
                    del cache, k, v
        return rows

    def fp8_rows(self) -> list[str]:
        p, rows = self.plan, []
        for batch in p.fp8_batches:
            kv_bytes = 2 * batch * p.fp8_context * p.num_kv_heads * p.head_dim * 2
            if 1.2 * kv_bytes > self.free_bytes():
                rows.append(f"| {batch} | skipped: exceeds memory | | | |")
                continue
            if self.device == "cuda" and self.torch.cuda.get_device_capability() < (8, 9):
                rows.append(f"| {batch} | skipped: fp8 needs compute capability >= 8.9 | | | |")
                continue
            times = {}
            for fmt in ("float16", "fp8", "int8"):
                cache, meta, q = self.batch(batch, p.fp8_context, 1, 16, fmt)
                times[fmt] = self.time(self.paged(q, cache, meta))
                del cache
            rows.append(
                f"| {batch} | {times['float16'] * 1e6:.1f} | {times['fp8'] * 1e6:.1f} | "
                f"{times['float16'] / times['fp8']:.2f} | {times['float16'] / times['int8']:.2f} |"
            )
            self.results[("fp8", batch)] = times["float16"] / times["fp8"]
        return rows

    def prefill_rows(self) -> list[str]:
        p, rows = self.plan, []
        for batch, length in p.prefill:
            cache, meta, q = self.batch(batch, length, length, 16, "auto")
            flops = 4 * batch * p.num_heads * p.head_dim * length * (length + 1) / 2
            t_ours = self.time(self.paged(q, cache, meta))
            k, v = self.contiguous_kv(cache, meta, length)
            q4 = q.view(batch, length, p.num_heads, p.head_dim).transpose(1, 2)
            t_sdpa = self.time(self.sdpa(q4, k, v, causal=True))
            expected = self.sdpa(q4, k, v, causal=True)().transpose(1, 2).flatten(0, 1)
            err = self.max_diff(self.paged(q, cache, meta)(), expected)
            rows.append(
                f"| {batch} | {length} | {t_ours * 1e3:.2f} | {flops / t_ours / 1e12:.1f} | "
                f"{flops / t_sdpa / 1e12:.1f} | {err:.1e} |"
            )
            del cache, k, v
        return rows

    def targets(self) -> list[str]:
        def status(value: float | None, ok: bool) -> str:
            if value is None:
                return "not measured"
            return "n/a (smoke)" if self.smoke else ("met" if ok else "MISSED")

        rows = []
        for block_size in self.plan.block_sizes:
            bw, ratio = self.results.get((block_size, 64, 4096), (None, None))
            rows.append(
                f"| decode bandwidth, block {block_size}, batch 64, ctx 4096 | "
                f"{'-' if bw is None else f'{bw:.0%}'} | >= {TARGET_DECODE_BW:.0%} of copy | "
                f"{status(bw, bw is not None and bw >= TARGET_DECODE_BW)} |"
            )
            rows.append(
                f"| paged / contiguous, block {block_size}, batch 64, ctx 4096 | "
                f"{'-' if ratio is None else f'{ratio:.2f}'} | <= {TARGET_PAGED_RATIO} | "
                f"{status(ratio, ratio is not None and ratio <= TARGET_PAGED_RATIO)} |"
            )
        for batch in self.plan.fp8_batches:
            speedup = self.results.get(("fp8", batch))
            rows.append(
                f"| fp8 / fp16 decode speed-up, batch {batch}, ctx {self.plan.fp8_context} | "
                f"{'-' if speedup is None else f'{speedup:.2f}x'} | >= {TARGET_FP8_SPEEDUP}x | "
                f"{status(speedup, speedup is not None and speedup >= TARGET_FP8_SPEEDUP)} |"
            )
        return rows

    def run(self) -> str:
        p = self.plan
        device = self.torch.cuda.get_device_name() if self.device == "cuda" else "CPU, TRITON_INTERPRET=1"
        copy_bw = self.copy_bandwidth()
        lines = [
            "# Attention kernels on "
            f"{device}{' (smoke run: shapes tiny, timings meaningless)' if self.smoke else ''}",
            "",
            f"Layer: {p.num_heads} query heads, {p.num_kv_heads} KV heads, head_dim {p.head_dim}, fp16 "
            f"queries. Device-to-device copy: {copy_bw / 1e9:.1f} GB/s.",
            "",
            "## Decode",
            "",
            "| block | batch | context | paged us | GB/s | of copy | SDPA contiguous us | paged / contiguous "
            "| max abs diff |",
            "|---|---|---|---|---|---|---|---|---|",
            *self.decode_rows(copy_bw),
            "",
            f"## 8-bit KV decode, context {p.fp8_context}, block 16",
            "",
            "| batch | fp16 us | fp8 us | fp8 speed-up | int8 speed-up |",
            "|---|---|---|---|---|",
            *self.fp8_rows(),
            "",
            "## Prefill (causal, no prefix)",
            "",
            "| batch | length | ms | TFLOP/s | SDPA contiguous TFLOP/s | max abs diff |",
            "|---|---|---|---|---|---|",
            *self.prefill_rows(),
            "",
            "## Targets",
            "",
            "| figure | value | target | status |",
            "|---|---|---|---|",
            *self.targets(),
        ]
        return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
