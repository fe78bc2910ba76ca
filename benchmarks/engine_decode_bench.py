"""SmolLM2-135M decode throughput on CPU with the torch attention backend, in-process.

Usage: python -m benchmarks.engine_decode_bench [--batches 1,8,32] [--prompt-len 64] [--decode 16]
                                                [--threads 1,0]   (0: one thread per core)

What is measured: `batch` requests of `prompt-len` tokens are admitted and prefilled in one
step (not timed); then `decode` steps are timed, each producing one token per request.
tokens/s = batch x decode steps / their wall time, i.e. generation throughput of the whole
engine loop (scheduler, block tables, model forward, sampling, detokenization), not of a
kernel. Greedy sampling with ignore_eos, so every request decodes exactly `decode` tokens.
Why in-process: it isolates the engine from HTTP and from client overheads that
benchmarks/server_overhead.py measures separately.

Noise: on a shared machine the absolute numbers move with load; the batch-to-batch ratio
within one run is the figure to quote (`speed-up vs batch 1`).
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

from reference_engine.config import EngineConfig
from reference_engine.sampling_params import SamplingParams


@dataclass(frozen=True, slots=True)
class DecodeResult:
    threads: int
    batch: int
    prompt_tokens: int
    decode_steps: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return self.batch * self.decode_steps / self.seconds

    @property
    def ms_per_step(self) -> float:
        return 1e3 * self.seconds / self.decode_steps


def measure_decode(
    batches: list[int],
    prompt_len: int = 64,
    decode: int = 32,
    model: str = "smollm2-135m",
    threads: int = 0,
    loaded=None,
) -> list[DecodeResult]:
    """A fresh engine per batch size (pool sized for the largest batch) on one loaded model.
    `threads` 0 means one per core; the engine's own default is half the cores."""
    from reference_engine.engine_factory import build_engine
    from reference_engine.model.registry import load_model

    threads = threads or os.cpu_count() or 1
    block_size = 16
    per_request = -(-(prompt_len + decode + 1) // block_size)
    config = EngineConfig(
        model=model,
        block_size=block_size,
        num_blocks=1 + max(batches) * per_request,
        max_model_len=prompt_len + decode + 1,
        max_num_seqs=max(batches),
        max_num_batched_tokens=max(batches) * prompt_len,
        attention_backend="torch",
        enable_prefix_caching=False,
        num_threads=threads,
    )
    loaded = loaded or load_model(model, "float32", config.device, config.seed)
    results = []
    for batch in batches:
        engine = build_engine(config, loaded).engine
        params = SamplingParams(max_tokens=decode + 1, temperature=0.0, ignore_eos=True)
        for i in range(batch):
            # Distinct prompts, so nothing is shared and every request has its own blocks.
            engine.add_request([100 + (i * 997 + j * 31) % 40_000 for j in range(prompt_len)], params)
        engine.step()  # prefill of the whole batch, and the first token; not timed
        assert len(engine.scheduler.running) == batch, "the whole batch must run at once"
        t0 = time.perf_counter()
        for _ in range(decode):
            engine.step()
        results.append(DecodeResult(threads, batch, prompt_len, decode, time.perf_counter() - t0))
        assert not engine.has_unfinished()
    return results


def markdown(results: list[DecodeResult]) -> str:
    lines = [
        "SmolLM2-135M (Q4_1 GGUF dequantised to fp32), torch attention backend; prompt "
        f"{results[0].prompt_tokens} tokens, {results[0].decode_steps} timed decode steps per batch.",
        "",
        "| torch threads | batch | decode tokens/s | ms per step | speed-up vs batch 1 |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        base = next(
            (b.tokens_per_s for b in results if b.threads == r.threads and b.batch == 1), r.tokens_per_s
        )
        lines.append(
            f"| {r.threads} | {r.batch} | {r.tokens_per_s:.1f} | {r.ms_per_step:.1f} "
            f"| {r.tokens_per_s / base:.2f}x |"
        )
    lines += [
        "",
        "Several torch threads on a machine whose cores are busy with other work stall at every "
        "parallel region; one thread is the steadier figure there.",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--threads", default="0", help="comma-separated torch thread counts (0: one per core)")
    args = ap.parse_args()
    from reference_engine.model.registry import load_model

    loaded = load_model("smollm2-135m", "float32", "cpu", 0)
    batches = [int(b) for b in args.batches.split(",")]
    results = [
        r
        for t in args.threads.split(",")
        for r in measure_decode(batches, args.prompt_len, args.decode, threads=int(t), loaded=loaded)
    ]
    print(markdown(results))


if __name__ == "__main__":
    main()
