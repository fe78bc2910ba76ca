"""The PagedAttention reproduction (benchmarks/paper_*.py), scaled down: the acceptance
inequalities of issue 10 on short simulator windows, the real-engine path on tiny-random,
the sharing arithmetic, and run_all's handling of benchmarks that fail."""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace

import pytest

# `benchmarks` is a folder of scripts, not an installed package: the repository root is on
# sys.path because `tests` is a package rooted there.
from benchmarks import paper_memory_runs, paper_sharing, run_all
from benchmarks.paper_workloads import ALPACA, SHAREGPT, draw_lengths


@pytest.mark.parametrize("dist", [SHAREGPT, ALPACA], ids=lambda d: d.name)
def test_synthetic_lengths_have_the_papers_means(dist):
    pairs = draw_lengths(dist, 40_000, seed=1)
    assert statistics.mean(p for p, _ in pairs) == pytest.approx(dist.mean_prompt, rel=0.03)
    assert statistics.mean(o for _, o in pairs) == pytest.approx(dist.mean_output, rel=0.03)
    assert max(p + o for p, o in pairs) <= 2048


@pytest.fixture(scope="module")
def sim_rows():
    # Quarter-length windows on the paper-like deployment (Qwen2.5-14B on one A100-40GB).
    return paper_memory_runs.run_platform(paper_memory_runs.SIM_SETUP, quick=True).rows


def _check(checks, what):
    return next(c for c in checks if c.what == what)


def test_simulator_meets_the_acceptance_inequalities(sim_rows):
    checks = paper_memory_runs.acceptance(sim_rows)
    for c in checks:
        assert c.met or c.what in {
            "Alpaca-like: paged, token-state share",
            "Alpaca-like: contiguous (max reservation), token-state share",
        }, c
    assert _check(checks, "ShareGPT-like: paged, token-state share").met
    assert _check(checks, "ShareGPT-like: contiguous (max reservation), token-state share").met
    for w in ("ShareGPT-like", "Alpaca-like"):
        for what in ("mean requests running", "most requests running", "output throughput"):
            assert _check(checks, f"{w}: paged / contiguous, {what}").met
    assert all(r.run.saturated for r in sim_rows)


def test_alpaca_misses_are_the_ones_the_notes_explain(sim_rows):
    """Paged at block 16 loses (16-1)/2 slots per ~110-token request; block 8 (same bytes)
    clears 96%. Contiguous cannot exceed ~context / max_model_len."""
    paged = next(r for r in sim_rows if r.workload == "Alpaca-like" and r.label == "paged")
    half = next(r for r in sim_rows if r.workload == "Alpaca-like" and r.block_size == 8)
    contig = next(r for r in sim_rows if r.workload == "Alpaca-like" and r.allocator == "contiguous")
    expected = paged.run.mean_context / (paged.run.mean_context + 7.5)
    assert paged.run.token_state_share == pytest.approx(expected, abs=0.015)
    assert half.run.token_state_share >= 0.96
    # Equal memory: the same bytes in blocks of half the size (to within one block's rounding).
    assert abs((half.num_blocks - 1) * 8 - (paged.num_blocks - 1) * 16) <= 16
    assert contig.run.token_state_share <= 1.2 * contig.run.mean_context / 2048


def test_real_engine_path_measures_the_same_quantities():
    setup = replace(
        paper_memory_runs.CPU_SETUP,
        warmup_steps=4,
        measure_steps={"ShareGPT-like": 24},
        requests={"ShareGPT-like": 60},
    )
    rows = paper_memory_runs.cpu_rows(setup, model="tiny-random")
    by = {r.allocator: r.run for r in rows}
    assert by["paged"].token_state_share >= 0.9 > by["contiguous-oracle"].token_state_share
    assert by["contiguous"].token_state_share < by["contiguous-oracle"].token_state_share
    assert by["contiguous"].max_running == 3
    assert by["paged"].mean_running >= 2 * by["contiguous"].mean_running
    assert all(run.window_steps == 24 and run.window_output_tokens > 0 for run in by.values())


def test_parallel_sampling_saving_matches_the_arithmetic():
    row = paper_sharing.parallel_sampling(ALPACA, n=4, requests=12)
    assert 0 < row.saving < 0.5
    assert row.saving == pytest.approx(row.expected_saving, abs=0.01)
    assert row.shared.peak_blocks < row.separate.peak_blocks


def test_shared_prefix_saves_what_prefix_sharing_predicts():
    row = paper_sharing.shared_prefix(prefix_tokens=80, requests=8)
    assert row.blocks_saved == row.expected_blocks_saved == 7 * 5
    assert row.off.prefill_computed - row.on.prefill_computed == 7 * 80


def test_run_all_reports_missing_failing_and_slow_benchmarks(tmp_path):
    py = sys.executable
    here = "benchmarks/run_all.py"
    missing = run_all.run_bench(run_all.Bench("m", "m", (py, "nope.py"), 5, "benchmarks/nope.py"), 5)
    failing = run_all.run_bench(
        run_all.Bench("f", "f", (py, "-c", "import sys; print('| a |'); sys.exit(3)"), 5, here), 5
    )
    # A timed-out benchmark gets SIGTERM first: it can stop the servers it started.
    undoes = "import signal, sys, time; signal.signal(15, lambda *a: print('undone') or sys.exit(1))"
    slow = run_all.run_bench(
        run_all.Bench("s", "s", (py, "-c", undoes + "; print('x', flush=True); time.sleep(30)"), 1, here), 1
    )
    ok = run_all.run_bench(run_all.Bench("o", "o", (py, "-c", "print('| ok |')"), 5, here), 5)
    assert [o.status for o in (missing, failing, slow, ok)] == ["missing", "failed", "timed out", "ok"]
    assert "undone" in slow.stdout
    text = run_all.render([missing, failing, slow, ok], "test machine", 1.0)
    assert "exit status 3" in text and "| ok |" in text and "## GPU kernels" in text
    # --only: the benchmarks that ran replace their sections; every other one is kept.
    by_key = {b.key: b for b in run_all.BENCHES}
    scheduler, exporter = by_key["scheduler"], by_key["exporter"]
    earlier = tmp_path / "RESULTS.md"
    earlier.write_text(
        run_all.render(
            [run_all.Outcome(b, "ok", "old machine", 1.0, f"| old {b.key} |") for b in (scheduler, exporter)],
            "old machine",
            2.0,
        )
    )
    redo = run_all.Outcome(exporter, "ok", "new machine", 1.0, "| new exporter |")
    merged = run_all.render([redo], "new machine", 1.0, run_all.earlier_sections(earlier))
    assert "| old scheduler |" in merged and "| new exporter |" in merged and "| old exporter |" not in merged
    assert merged.index(scheduler.title) < merged.index(exporter.title)
    assert f"| {scheduler.key} | ok | 1 |" in merged and "kept from earlier runs" in merged
    # A benchmark's own top-level headings are nested under its "##" section.
    assert run_all.nest_headings("# top\ntext\n## sub") == "### top\ntext\n#### sub"


def test_the_kv_event_benchmark_stream_is_what_it_claims():
    """benchmarks/kv_events_bench.py: its batches decode, keep their sequence, and exercise
    evictions and capacity misses (so the curve's code is on the measured path)."""
    from benchmarks import kv_events_bench

    payloads, blocks = kv_events_bench.stream(400)
    _, state = kv_events_bench.in_process(payloads)
    tier = state.instances["0"].tiers["GPU"]
    assert state.problems == {} and state.stream.expected == 400
    assert tier.stored_blocks + tier.removed_blocks == blocks
    assert tier.removed_blocks > 0 and tier.capacity_misses > 0
    assert len(tier.cached) == kv_events_bench.POOL
