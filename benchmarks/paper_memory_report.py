"""Markdown for benchmarks/paper_memory.py: per platform, the measured rows next to the
paper's figures, the acceptance checks, and the notes that explain every miss."""

from __future__ import annotations

from benchmarks.paper_memory_runs import PlatformResult, acceptance
from benchmarks.paper_workloads import PAPER

# Kwon et al., Fig. 2 (share of KV memory holding token states, OPT-13B, §6.2 experiment)
# and Fig. 13 (average batched requests, OPT-13B, ShareGPT at 2 req/s, Alpaca at 30 req/s).
PAPER_SHARE = {
    "contiguous": "20.4% (Orca Max)",
    "contiguous-oracle": "38.2% (Orca Oracle)",
    "paged": "96.3% (vLLM)",
}
PAPER_BATCH = {
    ("ShareGPT-like", "contiguous"): "7.00",
    ("ShareGPT-like", "contiguous-oracle"): "13.62 (1.95x)",
    ("ShareGPT-like", "paged"): "30.42 (4.35x)",
    ("Alpaca-like", "contiguous"): "7.00",
    ("Alpaca-like", "contiguous-oracle"): "72.75 (10.4x)",
    ("Alpaca-like", "paged"): "132.44 (18.9x)",
}

NOTES = """Notes:
- Token-state share = slots holding a computed token / slots of every allocated block (a block
  shared by several tables counted once), time-weighted over the measurement window; the
  function is `reference_engine.sim.replay.token_state_share`, the one `replay_trace` uses.
  Measured at saturation only: the window opens after a warm-up (on the simulator as long
  as the longest answer, so the first admission wave has turned over), closes before the
  trace's drain, and every window step ended with requests still waiting (column
  "saturated"). `paged` admits on present need and preempts (recompute) when the pool runs
  dry, as vLLM does: hence its preemptions, and a "most" above its mean. Throughput is
  output tokens per second of the window; the paper instead compares request rates at equal
  latency (Fig. 12), which needs the same saturated capacity.
- `contiguous-oracle` holds ~60% token state, not the paper's 38.2%: both reserve prompt +
  true output, but here the reservation is whole blocks from the paged pool, so there is no
  external fragmentation; the paper's Orca (Oracle) allocates contiguous chunks of varying
  size and loses the rest to fragmentation (its Fig. 2 splits the waste). What remains here
  is the reservation itself: slots held for tokens not generated yet.
- Alpaca-like under `contiguous`: ~110-token requests in 2048-token reservations cannot hold
  more than ~5% token state; the paper's 20-40% band (Fig. 2, one bar per system) can only come
  from its ShareGPT run. The concurrency ratios match the paper's Fig. 13 for both workloads.
- Alpaca-like under `paged` at block 16: each request wastes half a block on average in its
  last block, which is ~7% of a ~110-token request, so paging alone reaches ~93%. At block 8
  (same bytes, twice the blocks) the same run holds >96%. The launch post's "under 4%"
  assumes ShareGPT-length sequences, where half a block is ~2%.
- Throughput ratio on Llama-3.1-8B: its GQA cache (128 KiB/token, a quarter of a 13B MHA
  model's 800 KB in the paper's Table 1) holds ~74 max_model_len reservations, so the
  contiguous baseline already batches 73 requests and already amortises the 16 GB weight
  read. More requests then add KV reads and prefill compute in proportion: paged runs 3.5x
  the requests but each step takes ~1.9x as long, so throughput rises <2x. The paper's 2-4x
  is a property of its regime, a pool that holds only a handful of reservations next to a
  weight read that dominates the step, which Qwen2.5-14B on the same GPU reproduces.
- CPU rows: the real model on a shared 2-core machine, ShareGPT-like lengths x1/8 (prompt
  ~20 / output ~42 tokens on average, max_model_len 256, block size 2, a pool of three
  reservations); `--cpu-alpaca` adds Alpaca-like. Windows are short (~2 turnovers of the
  running set), so shares are indicative. CPU throughput is wall-clock, and the three
  allocators run one after another on a shared machine: quote the ratios, not tokens/s."""


def _pct(x: float) -> str:
    return f"{x:.1%}"


def platform_markdown(p: PlatformResult) -> str:
    s, rows = p.setup, p.rows
    first = rows[0]
    lines = [
        f"### {s.platform}",
        "",
        f"KV pool {first.num_blocks - 1:,} usable blocks x {first.block_size} tokens "
        f"= {(first.num_blocks - 1) * first.block_size:,} token slots, the same for every allocator; "
        f"max_model_len {s.max_model_len}, max_num_seqs {s.max_num_seqs}, "
        f"max_num_batched_tokens {s.max_num_batched_tokens}, prefix caching off. "
        + (
            "Poisson arrivals at "
            + ", ".join(f"{s.rates[w.name]:g} req/s ({w.name})" for w in s.workloads)
            + " (above capacity). "
            if s.spec is not None
            else "All requests queued at t=0 (an offline batch). "
        )
        + f"Warm-up {s.warmup_steps} steps, then a window of up to "
        + " / ".join(f"{s.measure_steps[w.name]} ({w.name})" for w in s.workloads)
        + f" steps. Wall time {p.wall_s:.0f} s.",
        "",
        "| workload | allocator | token-state share | paper (Fig. 2) | requests running: mean / most "
        "| x contiguous (mean) | paper mean batched (Fig. 13) | ms per step | output tokens/s | x contiguous "
        "| preemptions | saturated (window steps) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = next(
            b
            for b in rows
            if b.workload == r.workload and b.allocator == "contiguous" and b.block_size == r.base_block_size
        )
        run = r.run
        sat = f"{'yes' if run.saturated else 'NO'} ({run.window_steps}"
        sat += f", {run.unsaturated_steps} idle-queue)" if run.unsaturated_steps else ")"
        lines.append(
            f"| {r.workload} | {r.label} | {_pct(run.token_state_share)} | "
            f"{PAPER_SHARE.get(r.allocator, '')} | {run.mean_running:.1f} / {run.max_running} | "
            f"{run.mean_running / max(1e-9, base.run.mean_running):.2f}x | "
            f"{PAPER_BATCH.get((r.workload, r.allocator), '') if r.block_size == r.base_block_size else ''} "
            f"| {run.mean_step_s * 1e3:.1f} | {run.output_tokens_per_s:,.1f} | "
            f"{run.output_tokens_per_s / max(1e-9, base.run.output_tokens_per_s):.2f}x | "
            f"{run.num_preemptions} | {sat} |"
        )
    lines += ["", "| acceptance check | measured | target | met | why |", "|---|---|---|---|---|"]
    for c in acceptance(rows):
        lines.append(f"| {c.what} | {c.value} | {c.target} | {'met' if c.met else '**MISSED**'} | {c.why} |")
    return "\n".join(lines)


def markdown(platforms: list[PlatformResult]) -> str:
    head = (
        f"Reproduction of {PAPER}, Fig. 2 (KV memory holding token state), Fig. 13 (batched requests) "
        "and the 2-4x throughput claim, on the reference engine's real scheduler and block pool."
    )
    return "\n\n".join([head] + [platform_markdown(p) for p in platforms] + [NOTES])
