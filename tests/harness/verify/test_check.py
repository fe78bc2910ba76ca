"""A verdict's check: predicted minus measured per metric, the noise from the unchanged rerun,
and confirmed only when the measured effect goes the predicted way by more than the noise."""

from __future__ import annotations

import pytest

from harness.advisor.check_text import check_line
from harness.bundle.finding import Finding
from harness.verify.check import deciding_metric, judge_check, not_applicable, predicted_metrics

AS_RUN = {
    "preemptions": 40.0,
    "ttft_p50_s": 0.8,
    "ttft_p99_s": 3.8,
    "output_tokens_per_s": 56.0,
    "prefix_hit_ratio": 0.5,
}
RERUN = {
    "preemptions": 36.0,
    "ttft_p50_s": 0.9,
    "ttft_p99_s": 3.5,
    "output_tokens_per_s": 54.0,
    "prefix_hit_ratio": 0.52,
}
CHANGE = {"label": "a KV pool of 85 blocks", "engine": "bundled", "flags": ["--num-blocks", "85"]}


def _verdict(action="add_memory", base_pre=38, changed=None, **projected):
    changed = changed or {"preemptions": 0, "ttft_p50_s": 0.5, "ttft_p99_s": 1.2, "output_tokens_per_s": 60.0,
                          "prefix_hit_ratio": 0.6}  # fmt: skip
    return {
        "action": action,
        "projected": projected,
        "replay": {"baseline": {"preemptions": base_pre, "ttft_p99_s": 3.6}, "changed": changed},
    }


def test_fewer_preemptions_than_the_noise_allows_confirm_the_verdict() -> None:
    measured = {**AS_RUN, "preemptions": 2.0, "ttft_p99_s": 1.5}
    check = judge_check(_verdict(), CHANGE, AS_RUN, RERUN, measured)
    assert check.status == "confirmed" and check.confirmed and check.code == "verify_confirmed"
    assert check.decided_by == "preemptions" and check.noise["preemptions"] == 4.0
    assert check.error["preemptions"] == pytest.approx(-2.0) and check.error["ttft_p99_s"] == pytest.approx(
        -0.3
    )
    assert "preemptions 40 -> 2 measured, predicted 0; noise ±4" in check.reason.text
    line = check_line("add_memory", check.to_json())
    assert line.startswith("add_memory (--num-blocks 85): confirmed: preemptions predicted 0, measured 2")


def test_an_effect_within_the_noise_refutes_it() -> None:
    measured = {**AS_RUN, "preemptions": 37.0}  # 3 fewer, the unchanged rerun moved 4
    check = judge_check(_verdict(), CHANGE, AS_RUN, RERUN, measured)
    assert check.status == "refuted" and not check.confirmed and check.code == "verify_refuted"


def test_the_deciding_metric_follows_the_verdict() -> None:
    assert deciding_metric(_verdict()) == "preemptions"
    no_fewer = _verdict(changed={"preemptions": 38, "ttft_p99_s": 1.0})
    assert deciding_metric(no_fewer) == "ttft_p99_s"
    # 1 -> 0 is within the noise floor: no rerun could confirm it, TTFT p99 decides (a long
    # context run of the accuracy benchmark: 1 preemption, TTFT p99 6.1 s -> 2.4 s measured)
    one = _verdict(base_pre=1, changed={"preemptions": 0, "ttft_p99_s": 2.2})
    assert deciding_metric(one) == "ttft_p99_s"
    assert deciding_metric(_verdict(base_pre=2, changed={"preemptions": 0})) == "preemptions"
    curve = _verdict(hit_ratio=0.62, pool_blocks=20)
    assert (
        deciding_metric(curve) == "prefix_hit_ratio" and predicted_metrics(curve)["prefix_hit_ratio"] == 0.62
    )
    measured = {**AS_RUN, "prefix_hit_ratio": 0.55}  # up 5 points; the rerun moved 2
    check = judge_check(curve, CHANGE, AS_RUN, RERUN, measured)
    assert check.confirmed and check.error["prefix_hit_ratio"] == pytest.approx(0.07)


def test_kv_not_bottleneck_is_confirmed_when_more_memory_changes_nothing() -> None:
    v = _verdict("kv_not_bottleneck", changed={"preemptions": 0, "ttft_p99_s": 3.7})
    assert judge_check(v, CHANGE, AS_RUN, RERUN, {**AS_RUN, "ttft_p99_s": 3.6}).confirmed
    assert not judge_check(v, CHANGE, AS_RUN, RERUN, {**AS_RUN, "ttft_p99_s": 1.0}).confirmed


def test_unmeasured_and_not_applicable_checks_say_so() -> None:
    check = judge_check(_verdict(), CHANGE, {**AS_RUN, "preemptions": None}, RERUN, AS_RUN)
    assert check.status == "not applicable" and check.code == "verify_not_measured"
    na = not_applicable(
        {"label": "x"},
        Finding("verify_not_a_server_change", "a change to the prompts, not to the server's flags"),
    )
    assert check_line("make_prefix_identical", na.to_json()) == (
        "make_prefix_identical (no flags): not applicable: a change to the prompts, not to the server's flags"
    )


def test_a_miss_says_by_how_much_and_names_its_likeliest_cause() -> None:
    v = _verdict()  # predicts TTFT p99 1.2 s, p50 0.5 s
    measured = {**AS_RUN, "preemptions": 0.0, "ttft_p99_s": 3.0, "ttft_p50_s": 0.55, "prefix_hit_ratio": 0.57}
    slower = judge_check(v, CHANGE, AS_RUN, RERUN, measured, speed=1.6)
    miss = {m["subject"]: m for m in slower.misses}
    assert set(miss) == {"ttft_p99_s"}  # p50 is within 30%, the hit ratio within 5 points
    assert (
        miss["ttft_p99_s"]["error_share"] == pytest.approx(-0.6)
        and miss["ttft_p99_s"]["code"] == "verify_miss_speed"
    )
    assert "x1.60 slower in this rerun" in miss["ttft_p99_s"]["text"]
    same_speed = judge_check(v, CHANGE, AS_RUN, RERUN, measured, speed=1.05)
    assert same_speed.misses[0]["code"] == "verify_miss_model"
    noisy = judge_check(v, CHANGE, AS_RUN, {**RERUN, "ttft_p99_s": 1.0}, measured, speed=1.6)
    assert noisy.misses[0]["code"] == "verify_miss_noise"  # the unchanged rerun moved 2.8 s
    # fp8 KV on a CPU converts on every read: the slower steps are the change's own cost
    fp8 = judge_check(_verdict("quantize_kv_cache"), CHANGE, AS_RUN, RERUN, measured, speed=2.5)
    assert fp8.misses[0]["code"] == "verify_miss_change_speed" and "x2.50 slower" in fp8.misses[0]["text"]
    # A faster rerun cannot explain a TTFT above the prediction, nor a slower one a TTFT below it
    faster = judge_check(_verdict("quantize_kv_cache"), CHANGE, AS_RUN, RERUN, measured, speed=0.6)
    assert faster.misses[0]["code"] == "verify_miss_model"
    quick = {**measured, "ttft_p99_s": 0.5}
    faster = judge_check(v, CHANGE, AS_RUN, RERUN, quick, speed=0.6)
    assert faster.misses[0]["code"] == "verify_miss_speed" and "x1.67 faster" in faster.misses[0]["text"]
    slower = judge_check(_verdict("quantize_kv_cache"), CHANGE, AS_RUN, RERUN, quick, speed=2.5)
    assert slower.misses[0]["code"] == "verify_miss_model"


def test_a_curve_from_a_run_under_kv_pressure_misses_as_an_upper_bound() -> None:
    """The hit ratio is a share: a miss is over 5 points, and a curve drawn under KV pressure
    over-predicts for a reason of its own (the accuracy benchmark's vLLM case: 53.1% predicted
    at 15 blocks, 47.0% measured, the rerun still preempting)."""
    measured = {**AS_RUN, "prefix_hit_ratio": 0.47}
    noise_free = {**RERUN, "prefix_hit_ratio": AS_RUN["prefix_hit_ratio"]}
    bound = judge_check(_verdict(hit_ratio=0.531, upper_bound=True), CHANGE, AS_RUN, noise_free, measured)
    miss = {m["subject"]: m for m in bound.misses}
    assert miss["prefix_hit_ratio"]["code"] == "verify_miss_curve_pressure"
    assert miss["prefix_hit_ratio"]["predicted"] == 0.531 and miss["prefix_hit_ratio"]["measured"] == 0.47
    free = judge_check(_verdict(hit_ratio=0.531, upper_bound=False), CHANGE, AS_RUN, noise_free, measured)
    assert {m["subject"]: m["code"] for m in free.misses}["prefix_hit_ratio"] == "verify_miss_model"
    close = judge_check(_verdict(hit_ratio=0.51, upper_bound=True), CHANGE, AS_RUN, noise_free, measured)
    assert "prefix_hit_ratio" not in {m["subject"] for m in close.misses}  # 4 points: within the band
