"""What each weight format costs per decode step on this CPU, one thread: SmolLM2-135M's
decoder projections (30 layers x q, k, v, o, gate, up, down) and its tied logits head, as
float32, bfloat16, weight-only int8 (`aten._weight_int8pack_mm`) and weight-only float16
(fbgemm's fp16 GEMM, `--quantization fp16`), at batch 1 and 16. Each format runs the shapes
the engine runs it with: the cheaper formats fuse q/k/v and gate/up
(`reference_engine.model.projections`).

Usage: python -m benchmarks.weight_formats [--batches 1,16] [--repeats 5]

This is the measurement behind `--dtype auto` (`reference_engine/model_dtype.py`): it picks
bfloat16 only on CPUs that report native bf16 matmul, because elsewhere torch's bf16 path
converts and is slower than float32. The CPU's flags and the resulting choice are printed.
Random weights of the real shapes; the best of `--repeats` passes.
"""

from __future__ import annotations

import argparse
import time

import torch

from reference_engine.model.fp16_linear import Fp16Linear
from reference_engine.model.int8_linear import Int8Linear
from reference_engine.model_dtype import NATIVE_BF16_CPU_FLAGS, cpu_flags, resolve_model_dtype

HIDDEN, INTER, KV, LAYERS, VOCAB = 576, 1536, 192, 30, 49152
SHAPES = [(HIDDEN, HIDDEN), (KV, HIDDEN), (KV, HIDDEN), (HIDDEN, HIDDEN), (INTER, HIDDEN), (INTER, HIDDEN)]
SHAPES.append((HIDDEN, INTER))
FUSED = [(HIDDEN + 2 * KV, HIDDEN), (HIDDEN, HIDDEN), (2 * INTER, HIDDEN), (HIDDEN, INTER)]
PACKED = {"int8": Int8Linear, "fp16": Fp16Linear}


def shapes(fmt: str) -> list[tuple[int, int]]:
    return FUSED if fmt in PACKED else SHAPES


def projections(fmt: str) -> list[torch.nn.Module]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(LAYERS):
        for rows, cols in shapes(fmt):
            weight = torch.randn(rows, cols, generator=gen) * 0.02
            if fmt in PACKED:
                out.append(PACKED[fmt](weight))
            else:
                linear = torch.nn.Linear(cols, rows, bias=False)
                linear.weight.data = weight.to(getattr(torch, fmt))
                out.append(linear)
    return out


def best_ms(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    batches = [int(b) for b in args.batches.split(",")]
    head = torch.randn(VOCAB, HIDDEN) * 0.02
    rows = []
    for fmt in ("float32", "bfloat16", "int8", "fp16"):
        mods = projections(fmt)
        act = torch.bfloat16 if fmt == "bfloat16" else torch.float32
        head_w = head.to(act)  # the logits head stays in the model dtype under int8
        head_mod = Fp16Linear(head) if fmt == "fp16" else (lambda x, head_w=head_w: x @ head_w.t())
        for batch in batches:
            xs = {HIDDEN: torch.randn(batch, HIDDEN).to(act), INTER: torch.randn(batch, INTER).to(act)}

            def layers(mods=mods, xs=xs, fmt=fmt):
                with torch.inference_mode():
                    for mod, (_, cols) in zip(mods, shapes(fmt) * LAYERS):
                        mod(xs[cols])

            def logits(xs=xs, head_mod=head_mod):
                with torch.inference_mode():
                    head_mod(xs[HIDDEN])

            rows.append((fmt, batch, best_ms(layers, args.repeats), best_ms(logits, args.repeats)))
    flags = cpu_flags()
    native = sorted(flags & NATIVE_BF16_CPU_FLAGS) or ["none"]
    print(
        f"One thread. CPU bf16 flags present: {', '.join(native)}; `--dtype auto` resolves to "
        f"**{resolve_model_dtype('auto', 'cpu')}** here.\n"
    )
    print("| weights | batch | projections ms | logits head ms | step matmuls ms | speed vs float32 |")
    print("|---|---|---|---|---|---|")
    base = {b: p + h for f, b, p, h in rows if f == "float32"}
    for fmt, batch, proj, head_ms in rows:
        total = proj + head_ms
        print(f"| {fmt} | {batch} | {proj:.1f} | {head_ms:.1f} | {total:.1f} | {base[batch] / total:.2f}x |")
    print(
        "\nint8 is weight-only (one scale per output channel; the kernel takes bfloat16 activations); its "
        "logits head stays float32, as the engine keeps it. fp16 holds the projections and the logits "
        "head in float16 and computes in float32 (fbgemm); int8 and fp16 run fused q/k/v and gate/up."
    )


if __name__ == "__main__":
    main()
