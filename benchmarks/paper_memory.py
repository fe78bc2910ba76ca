"""PagedAttention's memory results, reproduced on the reference engine.

Usage: python -m benchmarks.paper_memory [--skip-cpu] [--skip-sim] [--quick]

What is measured: ShareGPT-like and Alpaca-like traces (benchmarks/paper_workloads.py) run
through three allocators over the *same* KV pool: `contiguous` (reserve max_model_len per
request at admission: the paper's Orca (Max)), `contiguous-oracle` (reserve prompt + true
output: Orca (Oracle)) and `paged`. Per run, at saturation (benchmarks/saturated_run.py):
the share of allocated KV slots holding token state, the mean and most requests running,
and output tokens/s. Why: the paper (Kwon et al., SOSP 2023) attributes vLLM's 2-4x
throughput to this chain: less waste -> more requests per batch -> more tokens per step.

Platforms:
- simulator, Qwen2.5-14B bf16 on one A100-40GB: the catalogue's nearest match to the paper's
  OPT-13B on one A100-40GB (27.5 GiB of weights vs 26 GB, a few GiB left for KV), so the pool
  is as tight as the paper's; max_model_len 2048 (OPT's context), max_num_seqs 256 (vLLM's
  default), block size 16;
- simulator, Llama-3.1-8B bf16 on one A100-40GB: a GQA model with a pool ten times the
  paper's in requests (what a 2024 deployment looks like);
- the real SmolLM2-135M on this CPU, every length, the context and the block size scaled by
  1/8, so tokens per block and reservation per request keep the paper's proportions while a
  run takes seconds of CPU per step instead of hours.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from benchmarks.paper_memory_report import markdown
from benchmarks.paper_memory_runs import CPU_SETUP, LLAMA_SETUP, SIM_SETUP, run_platform
from benchmarks.paper_workloads import ALPACA, SHAREGPT


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-sim", action="store_true")
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--skip-llama", action="store_true", help="only the paper-like simulated deployment")
    ap.add_argument(
        "--cpu-alpaca", action="store_true", help="also run Alpaca-like on the CPU (minutes more)"
    )
    ap.add_argument("--quick", action="store_true", help="quarter-length windows")
    args = ap.parse_args()
    setups = [] if args.skip_sim else [SIM_SETUP] + ([] if args.skip_llama else [LLAMA_SETUP])
    cpu = replace(CPU_SETUP, workloads=(SHAREGPT, ALPACA)) if args.cpu_alpaca else CPU_SETUP
    setups += [] if args.skip_cpu else [cpu]
    print(markdown([run_platform(s, args.quick) for s in setups]))


if __name__ == "__main__":
    main()
