"""Replays that match the run before they verify: the step-time fit recovers a known step
model from per-request server timings, a baseline is judged against the run with the stated
tolerance, and a what-if over a baseline that misses the run is indicative, not verified."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.advisor.fidelity import Measured, judge_fidelity
from harness.advisor.step_drift import Drift, OnRunClock
from harness.advisor.step_fit import StepFit, fit_steps

A, B, C = 0.004, 0.0015, 0.00008  # overhead, per decoding sequence, per prefilled token


def _server_timings(
    groups: list[tuple[int, int, int]],
    d: float = 0.0,
    stalled: int | None = None,
    slow_from: int | None = None,
) -> pd.DataFrame:
    """Requests as a server with step = A + B x decoding + C x prefill tokens (+ d x prefill
    tokens x their prompt's length) would time them: each group of k requests is scheduled
    together, prefilled in one step, then decoded together for `tokens - 1` steps; groups
    follow one another. Group `stalled`'s prefill step took 5 s more (the machine stalled);
    from group `slow_from` on, every step takes 3x as long (other work took the machine)."""
    rows, t = [], 1_000.0
    for i, (k, prompt, tokens) in enumerate(groups):
        speed = 3.0 if slow_from is not None and i >= slow_from else 1.0
        prefill = speed * (A + C * k * prompt + d * k * prompt * prompt) + (5.0 if i == stalled else 0.0)
        decode = speed * (tokens - 1) * (A + B * k)
        for _ in range(k):
            rows.append(
                {
                    "ok": True, "n": 1, "prompt_tokens": prompt, "output_tokens": tokens,
                    "server_arrival_unix": t, "server_queue_time_s": 0.0,
                    "server_prefill_time_s": prefill, "server_ttft_s": prefill,
                    "server_decode_time_s": decode, "server_e2e_s": prefill + decode,
                    "server_num_preemptions": 0, "server_cached_prompt_tokens": 0,
                }
            )  # fmt: skip
        t += prefill + decode + 0.5
    return pd.DataFrame(rows)


def test_the_fit_recovers_a_known_step_model() -> None:
    rng = np.random.default_rng(3)
    groups = [
        (int(k), int(rng.integers(50, 600)), int(rng.integers(8, 64)))
        for k in rng.choice([1, 2, 3, 5, 8], 30)
    ]
    fit = fit_steps(_server_timings(groups))
    assert fit is not None and fit.median_error < 1e-6
    assert (fit.overhead_s, fit.per_decode_seq_s, fit.per_prefill_token_s) == pytest.approx(
        (A, B, C), rel=1e-6
    )
    assert fit.step_time([(1, 100)] * 4 + [(300, 300)]) == pytest.approx(A + 4 * B + 300 * C)


def _groups(seed: int) -> list[tuple[int, int, int]]:
    rng = np.random.default_rng(seed)
    sizes = rng.choice([1, 2, 3, 5, 8], 30)
    return [(int(k), int(rng.integers(50, 600)), int(rng.integers(8, 64))) for k in sizes]


def test_the_fit_recovers_a_prefill_cost_that_grows_with_the_prompt() -> None:
    D = 2e-7  # a 512-token prompt costs 0.1 s more than its per-token share
    fit = fit_steps(_server_timings(_groups(5), d=D))
    assert fit is not None and fit.median_error < 1e-6
    assert (fit.overhead_s, fit.per_decode_seq_s, fit.per_prefill_token_s, fit.per_prefill_context_s) == (
        pytest.approx((A, B, C, D), rel=1e-5)
    )
    assert fit.step_time([(1, 100), (512, 512)]) == pytest.approx(A + B + 512 * C + 512 * 512 * D)


def test_a_stalled_step_is_an_outlier_and_does_not_set_the_slope() -> None:
    groups = _groups(7)
    fit = fit_steps(_server_timings(groups, stalled=3))
    assert fit is not None and fit.outliers == groups[3][0]  # the group's k prefill rows
    assert fit.per_prefill_token_s == pytest.approx(C, rel=1e-6) and fit.median_error < 1e-6
    assert f"{fit.outliers} outlier(s) left out" in fit.describe()
    # ... but it is replayed where it happened: one stall of 5 s, at the start of that step.
    frame = _server_timings(groups, stalled=3)
    start = frame["server_arrival_unix"].iloc[sum(k for k, _, _ in groups[:3])]
    assert len(fit.stalls) == 1 and fit.stalls[0] == (
        pytest.approx(start, abs=1e-3),
        pytest.approx(5.0, rel=1e-3),
    )
    assert "1 stalled step(s) (5.00 s over the model in all)" in fit.describe()


def test_a_stall_delays_the_replayed_step_it_falls_in_once_and_an_idle_replay_not_at_all() -> None:
    fit = StepFit(0.1, 0.0, 0.0, 20, 0.0)
    clock = OnRunClock(fit, None, t0_unix=1000.0, stalls=((1000.25, 2.0), (1003.0, 1.0)))
    assert clock.step_time_at([(1, 5)], 0.2) == pytest.approx(2.1)  # the step over 1000.2-1000.3
    assert clock.step_time_at([(1, 5)], 0.3) == pytest.approx(0.1)  # spent
    assert clock.step_time_at([(1, 5)], 4.0) == pytest.approx(0.1)  # 1003.0 passed while idle


def test_a_server_that_slowed_down_mid_run_is_fitted_with_its_drift() -> None:
    groups = _groups(11)
    steady = fit_steps(_server_timings(groups))
    assert steady is not None and steady.drift is None  # nothing to explain
    frame = _server_timings(groups, slow_from=15)
    fit = fit_steps(frame)
    assert fit is not None and fit.drift is not None
    assert fit.drift.spread == pytest.approx(3.0, rel=0.05) and fit.median_error < 0.05
    assert "drifted x3.0" in fit.describe()
    on_clock = OnRunClock(fit, fit.drift, t0_unix=0.0)
    batch = [(1, 300)] * 4 + [(200, 200)]
    early, late = frame["server_arrival_unix"].iloc[[5, -5]]
    assert on_clock.step_time_at(batch, early) == pytest.approx(A + 4 * B + 200 * C, rel=0.05)
    assert on_clock.step_time_at(batch, late) == pytest.approx(3 * (A + 4 * B + 200 * C), rel=0.05)


def test_a_drifting_model_times_a_step_by_the_speed_at_its_start_on_the_runs_clock() -> None:
    drift = Drift((1000.0, 1010.0), (1.0, 3.0))
    model = OnRunClock(StepFit(0.01, 0.0, 0.0, 20, 0.0), drift, t0_unix=995.0, scale=1.0)
    assert model.step_time([(1, 5)]) == pytest.approx(0.01)
    assert model.step_time_at([(1, 5)], 0.0) == pytest.approx(0.01)  # before the first knot: held
    assert model.step_time_at([(1, 5)], 10.0) == pytest.approx(0.02)  # halfway between the knots
    assert model.step_time_at([(1, 5)], 60.0) == pytest.approx(0.03)


def test_a_prompt_over_the_token_budget_is_fitted_as_its_chunks_steps() -> None:
    """A server with a 256-token budget prefills a 600-token prompt in 3 steps: its prefill time
    holds 3 overheads; told the budget, the fit recovers the model."""
    groups = [(1, prompt, tokens) for _, prompt, tokens in _groups(13)]
    frame = _server_timings(groups)
    chunks = np.ceil(frame["prompt_tokens"] / 256)
    frame["server_prefill_time_s"] += (chunks - 1) * A
    frame["server_ttft_s"] += (chunks - 1) * A
    frame["server_e2e_s"] += (chunks - 1) * A
    fit = fit_steps(frame, budget=256)
    assert fit is not None and fit.median_error < 1e-6
    assert (fit.overhead_s, fit.per_prefill_token_s) == pytest.approx((A, C), rel=1e-5)


def test_no_fit_without_server_timings_or_with_too_few_requests() -> None:
    frame = _server_timings([(2, 100, 10)] * 3)
    assert fit_steps(frame) is None  # 6 requests: too few rows
    assert fit_steps(frame.drop(columns=["server_decode_time_s"])) is None


def test_preempted_requests_do_not_enter_the_fit() -> None:
    frame = _server_timings([(k, 200, 20) for k in (1, 2, 4, 8) * 4])
    skewed = frame.copy()
    skewed.loc[::3, "server_decode_time_s"] *= 10  # a recompute inflates these
    skewed.loc[::3, "server_num_preemptions"] = 1
    fit = fit_steps(skewed)
    assert fit is not None and fit.per_decode_seq_s == pytest.approx(B, rel=1e-6)


def test_fidelity_holds_the_baseline_to_25_percent_with_a_small_absolute_slack() -> None:
    measured = Measured(preemptions=40.0, ttft_p99_s=2.0, ttft_source="server")
    ok = judge_fidelity(measured, 34, 2.4)
    assert ok.within and ok.preemption_error == pytest.approx(-0.15) and ok.ttft_error == pytest.approx(0.2)
    assert ok.reason.code == "replay_within_tolerance"
    off = judge_fidelity(measured, 20, 2.1)
    assert (
        not off.within and off.reason.code == "replay_off_run" and off.preemption_error == pytest.approx(-0.5)
    )
    slow = judge_fidelity(measured, 40, 3.0)
    assert not slow.within and slow.reason.code == "replay_off_run" and slow.ttft_error == pytest.approx(0.5)
    # 25% of a handful of preemptions is noise: within 2 of them is a match.
    assert judge_fidelity(Measured(1.0, 2.0, "client"), 3, 2.0).within
    assert judge_fidelity(Measured(0.0, 2.0, "client"), 0, 2.0).within
    assert not judge_fidelity(Measured(None, 2.0, "client"), 0, 2.0).within


def test_a_step_fit_times_a_batch_by_its_decoding_sequences_and_prefill_tokens() -> None:
    fit = StepFit(0.001, 0.002, 0.0001, rows=20, median_error=0.1)
    assert fit.step_time([]) == 0.0
    assert fit.step_time([(1, 50), (1, 80)]) == pytest.approx(0.001 + 2 * 0.002)
    assert fit.step_time([(128, 128), (1, 9)]) == pytest.approx(0.001 + 0.002 + 128 * 0.0001)


def test_a_baseline_that_misses_the_run_makes_the_verdicts_indicative(tmp_path):
    """The same preempting run twice: as simulated (the baseline replay reproduces it), and
    with the server's preemption counter tripled (a run the replay does not reproduce)."""
    from harness.advisor import run_inputs
    from harness.advisor.advice import advise
    from reference_engine.config import EngineConfig
    from reference_engine.sim.engine import SimSpec
    from tests.harness.advisor.bundles import long_requests, simulate_bundle

    engine = EngineConfig(max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=4096)
    spec = SimSpec("llama-3.1-70b", "h100-80gb", 2, 0.9)
    folder = simulate_bundle(tmp_path / "b", long_requests(50, 0.5), spec, engine, model="llama-3.1-70b")
    matched = advise(run_inputs.load(folder))
    assert matched.fidelity["within"], matched.fidelity
    assert {v.status for v in matched.verdicts if v.replay} == {"verified"}
    server = pd.read_parquet(folder / "server.parquet")
    server["preemptions"] *= 3
    server.to_parquet(folder / "server.parquet", index=False)
    missed = advise(run_inputs.load(folder))
    assert not missed.fidelity["within"] and missed.verdicts
    for v in missed.verdicts:
        if v.replay and v.replay["shown"]:  # the replay shows the gain ...
            assert v.status == "indicative" and not v.verified  # ... but cannot verify it
            assert v.status_reason.code == "replay_off_run"
    assert abs(missed.fidelity["preemption_error"]) > 0.25  # the baseline missed on preemptions
    assert any(v.status == "indicative" for v in missed.verdicts)
