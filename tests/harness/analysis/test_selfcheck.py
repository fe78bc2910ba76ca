"""The measurement self-check on synthetic bundles: each reason fires on its own evidence
and only then (the real-run cases are in test_analysis_real.py)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.analysis.selfcheck import self_check
from harness.analysis.summary import summarize
from harness.analysis.ttft_histogram import histogram_quantile
from harness.bundle.finding import codes
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
    assert not check.reliable and codes(check.reasons) == ["client_lag_typical"]


def test_a_few_late_reads_that_move_the_p99_are_caught(tmp_path):
    b = read_bundle(make_bundle(tmp_path / "b", Spec(preempt_at_s=None, n_requests=200)))
    req = b.requests.copy()
    worst = req["ttft_s"].nlargest(6).index  # the slowest requests get slower still: the p99 moves
    req.loc[worst, ["ttft_s", "e2e_s"]] += 0.5
    check = self_check(req, b.server, b.run)
    assert not check.reliable and check.reasons[0].code == "client_lag_moved_p99"
    assert check.reasons[0].subject == "TTFT"


def test_first_token_without_visible_text_is_not_client_lag(tmp_path):
    # Client TTFT counts text-bearing chunks; a model whose first tokens decode to "" makes it
    # later than the server's first token, but E2E agrees: not the client's fault.
    b = read_bundle(make_bundle(tmp_path / "b", Spec()))
    req = b.requests.copy()
    req["ttft_s"] += 0.3
    assert self_check(req, b.server, b.run).reliable


def test_schedule_lag_cpu_warning_and_client_errors(tmp_path):
    lagging = summarize(make_bundle(tmp_path / "a", Spec(schedule_lag_s=0.2)))["selfcheck"]["reasons"]
    assert codes(lagging) == ["schedule_lag"] and lagging[0]["text"]  # summary.json: code beside text
    assert summarize(make_bundle(tmp_path / "a2", Spec(schedule_lag_s=0.002)))["reliable"]
    run_warn = {"warnings": ["CPU usage above 90%! This may constrain your throughput"]}
    warned = summarize(make_bundle(tmp_path / "b", Spec(run_extra=run_warn)))["selfcheck"]["reasons"]
    assert codes(warned) == ["load_generator_cpu"]
    d = make_bundle(tmp_path / "c", Spec())
    (d / "logs").mkdir()
    (d / "logs" / "locust-worker0.log").write_text(
        "[x] vm/WARNING/root: CPU usage above 90%! This may constrain\n"
    )
    s = summarize(d)
    assert not s["reliable"] and "locust-worker0.log" in s["selfcheck"]["cpu_warnings"][0]
    assert codes(s["selfcheck"]["reasons"]) == ["load_generator_cpu"]
    b = read_bundle(make_bundle(tmp_path / "e", Spec()))
    req = b.requests.copy()
    req.loc[0, ["ok", "error_class"]] = [False, "client_error"]
    assert codes(self_check(req, b.server, b.run).reasons) == ["client_errors"]


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
    assert "queue_time_unknown" in codes(check.notes)
    idle = self_check(req, b.server.assign(requests_waiting=0.0), b.run)
    assert not idle.reliable  # no queue: the delay is the client's
    assert "queue_time_excluded" in codes(idle.notes) and codes(idle.reasons) == ["client_lag_typical"]


def test_too_few_server_timings_are_named_as_too_few_not_as_missing(tmp_path):
    b = read_bundle(make_bundle(tmp_path / "b", Spec()))
    measured = b.requests[b.requests["phase"] == "measure"]
    few = measured.head(4)
    check = self_check(few, b.server, b.run)
    assert check.method == "none"
    assert codes(check.notes) == ["server_ttft_too_few"], check.notes
