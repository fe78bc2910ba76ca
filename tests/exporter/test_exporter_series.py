"""Ring buffer, reset-aware windowed rates, and the diagnosis rules (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.diagnosis import ACTIONS, Thresholds, diagnose
from exporter.dialects.sample import EngineSample
from exporter.series import Point, TargetSeries, hit_ratio, increase, preemption_rate, rate

KEY = ("m", "0")


def sample(**kw) -> EngineSample:
    return EngineSample(model="m", instance="0", **kw)


def test_increase_treats_a_drop_as_restart() -> None:
    # 10 -> 20 (+10), restart -> 3 (+3), 3 -> 8 (+5)
    assert increase([(0, 10.0), (1, 20.0), (2, 3.0), (3, 8.0)]) == 18.0
    assert increase([(0, 5.0)]) is None
    assert increase([(0, 5.0), (1, None), (2, 7.0)]) == 2.0
    assert rate([(0, 10.0), (4, 20.0), (8, 2.0)]) == pytest.approx(12 / 8)


@given(st.lists(st.one_of(st.none(), st.floats(0, 1e12)), max_size=40))
def test_rates_never_negative(values: list[float | None]) -> None:
    pairs = [(float(i), v) for i, v in enumerate(values)]
    inc = increase(pairs)
    assert inc is None or inc >= 0
    r = rate(pairs)
    assert r is None or r >= 0


def test_hit_ratio_and_preemption_rate_over_a_restart() -> None:
    window = [
        (0.0, sample(prefix_cache_queries_tokens=1000.0, prefix_cache_hits_tokens=400.0, preemptions=10.0)),
        (1.0, sample(prefix_cache_queries_tokens=1100.0, prefix_cache_hits_tokens=450.0, preemptions=12.0)),
        # engine restarted: every counter starts again from zero
        (2.0, sample(prefix_cache_queries_tokens=100.0, prefix_cache_hits_tokens=10.0, preemptions=1.0)),
    ]
    assert hit_ratio(window) == pytest.approx((50 + 10) / (100 + 100))
    assert preemption_rate(window) == pytest.approx((2 + 1) / 2)
    assert hit_ratio(window[:1]) is None
    idle = [(0.0, sample(prefix_cache_queries_tokens=5.0, prefix_cache_hits_tokens=5.0))] * 2
    assert hit_ratio(idle) is None  # nothing queried: unknown, not 0 or 1


def test_ring_buffer_window_skips_down_points_and_bounds_memory() -> None:
    series = TargetSeries(maxlen=5)
    for t in range(8):
        up = t != 5
        series.append(Point(float(t), up, {KEY: sample(requests_running=float(t))} if up else {}))
    assert len(series.points) == 5
    assert [p.t for p in series.since(4.0)] == [5.0, 6.0, 7.0]
    assert [t for t, _ in series.window(KEY, 3.0)] == [6.0, 7.0]  # (4, 7], the down point 5 skipped
    assert [t for t, _ in series.window(KEY, 4.0)] == [4.0, 6.0, 7.0]


def saturated_window(
    n: int = 10,
    usage: float = 0.99,
    preempt_every: int = 1,
    running: float = 20.0,
    dtype: str | None = "auto",
    gmu: float | None = 0.85,
) -> list:
    return [
        (
            float(i),
            sample(
                kv_usage_ratio=usage,
                preemptions=float(i // preempt_every),
                requests_running=running,
                requests_waiting=5.0,
                kv_cache_dtype=dtype,
                gpu_memory_utilization=gmu,
            ),
        )
        for i in range(n)
    ]


def test_saturation_and_preemption_advise_memory_actions() -> None:
    d = diagnose(saturated_window())
    assert set(d.advice) == set(ACTIONS)
    assert d.advice["add_memory"] and d.advice["quantize_kv_cache"] and d.advice["raise_memory_utilization"]
    assert not d.advice["cut_context"] and not d.advice["kv_not_bottleneck"]
    assert "KV usage" in d.reasons["add_memory"] and "preemptions" in d.reasons["add_memory"]


def test_already_quantized_and_full_utilization_are_not_advised_again() -> None:
    d = diagnose(saturated_window(dtype="fp8_e4m3", gmu=0.95))
    assert d.advice["add_memory"]
    assert not d.advice["quantize_kv_cache"] and not d.advice["raise_memory_utilization"]


def test_few_long_requests_filling_the_cache_advise_cut_context() -> None:
    assert diagnose(saturated_window(running=2.0)).advice["cut_context"]


def test_persistent_preemption_alone_is_pressure() -> None:
    d = diagnose(saturated_window(usage=0.7))
    assert d.advice["add_memory"] and d.evidence.preempting_fraction == 1.0
    rare = diagnose(saturated_window(usage=0.7, preempt_every=5))  # 2 of 9 intervals
    assert not rare.advice["add_memory"] and not rare.advice["quantize_kv_cache"]
    assert rare.advice["kv_not_bottleneck"]  # 5 waiting at 70 % usage: the KV cache is not the limit


def test_waiting_with_low_usage_means_kv_not_bottleneck() -> None:
    w = [
        (float(i), sample(kv_usage_ratio=0.3, requests_waiting=8.0, requests_running=64.0, preemptions=0.0))
        for i in range(10)
    ]
    d = diagnose(w)
    assert d.advice["kv_not_bottleneck"] and sum(d.advice.values()) == 1


def test_short_or_empty_window_advises_nothing() -> None:
    assert not any(diagnose([]).advice.values())
    assert not any(diagnose(saturated_window(n=2)).advice.values())


def test_make_prefix_identical_needs_workload_evidence() -> None:
    w = [
        (float(i), sample(prefix_cache_queries_tokens=1000.0 * i, prefix_cache_hits_tokens=50.0 * i))
        for i in range(10)
    ]
    assert not diagnose(w).advice["make_prefix_identical"]  # live: no evidence, stays 0
    assert diagnose(w, expected_hit_ratio=0.6).advice["make_prefix_identical"]
    assert not diagnose(w, expected_hit_ratio=0.08).advice["make_prefix_identical"]


def test_thresholds_are_parameters() -> None:
    w = saturated_window(usage=0.95, preempt_every=100)
    assert not diagnose(w).advice["add_memory"]
    assert diagnose(w, Thresholds(saturated_usage=0.9)).advice["add_memory"]


def test_rules_run_on_recorded_dicts() -> None:
    w = [(t, EngineSample.from_dict(s.to_dict())) for t, s in saturated_window()]
    assert diagnose(w).advice == diagnose(saturated_window()).advice


def test_history_is_shorter_for_targets_with_many_instances() -> None:
    from exporter.dialects.sample import EngineSample

    series = TargetSeries(maxlen=100, max_samples=50)
    for t in range(30):
        series.append(Point(float(t), True, {("m", str(i)): EngineSample("m", str(i)) for i in range(10)}))
    assert len(series.points) == 5 and series.points[-1].t == 29.0  # 50 samples kept
    for t in range(30, 33):
        series.append(Point(float(t), True, {("m", str(i)): EngineSample("m", str(i)) for i in range(40)}))
    assert len(series.points) == 2  # never fewer than two points, for rates
    for t in range(33, 200):
        series.append(Point(float(t), False))
    assert len(series.points) == 100  # down points hold no samples: maxlen bounds them
