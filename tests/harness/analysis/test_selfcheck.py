"""The measurement self-check on synthetic bundles: each reason fires on its own evidence
and only then (the real-run cases are in test_analysis_real.py)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.analysis.selfcheck import histogram_quantile, self_check
from harness.analysis.summary import summarize
from harness.bundle.read import read_bundle
from tests.harness.bundle.factory import Spec, make_bundle


def test_a_healthy_client_is_reliable(tmp_path):
    s = summarize(make_bundle(tmp_path / "b", Spec()))
    assert s["reliable"] is True and s["selfcheck"]["method"] == "per_request"
    assert s["selfcheck"]["lag_p50_s"] < 0.005


def test_a_lagging_client_is_unreliable_with_the_reason(tmp_path):
    b = read_bundle(make_bundle(tmp_path / "b", Spec()))
    req = b.requests.copy()
    lag = np.random.default_rng(1).uniform(0.1, 0.4, len(req))
    req["ttft_s"] += lag  # a busy client reads the first and the last chunk late
    req["e2e_s"] += lag
    check = self_check(req, b.server, b.run)
    assert not check.reliable and "late (lag p50 > 50 ms)" in check.reasons[0]


def test_a_few_late_reads_that_move_the_p99_are_caught(tmp_path):
    b = read_bundle(make_bundle(tmp_path / "b", Spec(preempt_at_s=None, n_requests=200)))
    req = b.requests.copy()
    worst = req["ttft_s"].nlargest(6).index  # the slowest requests get slower still: the p99 moves
    req.loc[worst, ["ttft_s", "e2e_s"]] += 0.5
    check = self_check(req, b.server, b.run)
    assert not check.reliable and "moved the TTFT p99" in check.reasons[0]


def test_first_token_without_visible_text_is_not_client_lag(tmp_path):
    # Client TTFT counts text-bearing chunks; a model whose first tokens decode to "" makes it
    # later than the server's first token, but E2E agrees: not the client's fault.
    b = read_bundle(make_bundle(tmp_path / "b", Spec()))
    req = b.requests.copy()
    req["ttft_s"] += 0.3
    assert self_check(req, b.server, b.run).reliable


def test_schedule_lag_cpu_warning_and_client_errors(tmp_path):
    assert (
        "schedule lag p99"
        in summarize(make_bundle(tmp_path / "a", Spec(schedule_lag_s=0.2)))["selfcheck"]["reasons"][0]
    )
    assert summarize(make_bundle(tmp_path / "a2", Spec(schedule_lag_s=0.002)))["reliable"]
    run_warn = {"warnings": ["CPU usage above 90%! This may constrain your throughput"]}
    assert (
        "CPU" in summarize(make_bundle(tmp_path / "b", Spec(run_extra=run_warn)))["selfcheck"]["reasons"][0]
    )
    d = make_bundle(tmp_path / "c", Spec())
    (d / "logs").mkdir()
    (d / "logs" / "locust-worker0.log").write_text(
        "[x] vm/WARNING/root: CPU usage above 90%! This may constrain\n"
    )
    s = summarize(d)
    assert not s["reliable"] and "locust-worker0.log" in s["selfcheck"]["cpu_warnings"][0]
    b = read_bundle(make_bundle(tmp_path / "e", Spec()))
    req = b.requests.copy()
    req.loc[0, ["ok", "error_class"]] = [False, "client_error"]
    assert "inside the client" in self_check(req, b.server, b.run).reasons[0]


def test_histogram_fallback_when_the_server_gives_no_per_request_timings(tmp_path):
    ok = summarize(
        make_bundle(tmp_path / "a", Spec(server_timings=False, histograms=True, preempt_at_s=None))
    )
    assert ok["selfcheck"]["method"] == "histogram" and ok["reliable"]
    bad = summarize(
        make_bundle(
            tmp_path / "b", Spec(server_timings=False, histograms=True, preempt_at_s=None, overhead_s=0.4)
        )
    )
    assert bad["selfcheck"]["method"] == "histogram" and not bad["reliable"]
    none = summarize(make_bundle(tmp_path / "c", Spec(server_timings=False)))
    assert none["selfcheck"]["method"] == "none" and none["reliable"]


def test_histogram_quantile_interpolates_like_prometheus():
    bounds = np.array([0.1, 0.2, 0.4, np.inf])
    counts = np.array([10.0, 30.0, 40.0, 40.0])
    assert histogram_quantile(bounds, counts, 0.5) == pytest.approx(0.15)
    assert histogram_quantile(bounds, counts, 0.5, upper=True) == 0.2
    assert histogram_quantile(bounds, counts, 0.99) == pytest.approx(0.2 + 0.2 * (39.6 - 30) / 10)
    assert histogram_quantile(bounds, np.array([0.0, 0.0, 0.0, 5.0]), 0.5) is None  # in +Inf: unknown


def test_timings_without_queue_time_are_not_read_as_client_lag(tmp_path):
    """llama.cpp's timings start when a slot takes the request: with requests waiting for a
    slot, the wait shows up as client delay and the lag cannot be judged; without any, it can."""
    b = read_bundle(make_bundle(tmp_path / "b", Spec()))
    req = b.requests.copy()
    req["server_queue_time_s"] = np.nan
    wait = np.random.default_rng(2).uniform(0.1, 0.4, len(req))  # the wait for a free slot
    req["ttft_s"] += wait
    req["e2e_s"] += wait
    queued = b.server.assign(requests_waiting=2.0)
    check = self_check(req, queued, b.run)
    assert check.reliable and check.method == "per_request" and check.lag_p50_s is None
    assert any("waited for a slot" in n and "not checked" in n for n in check.notes)
    idle = b.server.assign(requests_waiting=0.0)
    assert not self_check(req, idle, b.run).reliable  # no queue: the delay is the client's


def test_too_few_server_timings_are_named_as_too_few_not_as_missing(tmp_path):
    b = read_bundle(make_bundle(tmp_path / "b", Spec()))
    measured = b.requests[b.requests["phase"] == "measure"]
    few = measured.head(4)
    check = self_check(few, b.server, b.run)
    assert check.method == "none"
    assert any("server TTFT for 4 request(s), fewer than the 5" in n for n in check.notes), check.notes
    assert not any(n.startswith("no server TTFT") for n in check.notes)
