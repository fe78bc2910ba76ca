"""Client-side figures: every summary number recomputed by hand from requests.parquet."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from exporter.units import parse_duration
from harness.analysis.latency import analyse_latency, throughput_over_time
from harness.analysis.slo import Slos, meets_slos, parse_slos
from harness.analysis.summary import summarize, write_summary
from harness.bundle.finding import codes
from harness.bundle.read import read_bundle
from tests.harness.bundle.factory import Spec, make_bundle

Q = [50, 90, 95, 99]


def _check(dist: dict, values) -> None:
    v = np.asarray(values, dtype=float)
    assert dist["count"] == v.size
    assert dist["mean"] == pytest.approx(v.mean(), rel=1e-12)
    for q, expected in zip(Q, np.percentile(v, Q)):
        assert dist[f"p{q}"] == pytest.approx(expected, rel=1e-12)


def test_summary_equals_figures_recomputed_from_the_parquet(tmp_path):
    d = make_bundle(tmp_path / "b", Spec(n_requests=300, error_every=13))
    s = write_summary(d, "ttft=300ms,tpot=25ms,e2e=2s")
    r = pd.read_parquet(d / "requests.parquet")
    ok = r[r["ok"]]
    _check(s["latency"]["ttft"], ok["ttft_s"])
    _check(s["latency"]["e2e"], ok["e2e_s"])
    # ITL: each request's mean gap between tokens (AIPerf's and GuideLLM's definition) ...
    per_request = [np.sum(x) / (t - 1) for x, t in zip(ok["itl_s"], ok["output_tokens"]) if t > 1]
    _check(s["latency"]["itl"], per_request)
    assert s["headline"]["itl_mean_s"] == pytest.approx(np.mean(per_request), rel=1e-12)
    # ... and every gap of every request pooled, the second, labelled figure.
    _check(s["latency"]["itl_pooled"], np.concatenate([np.asarray(x, float) for x in ok["itl_s"]]))
    tpot = (ok["e2e_s"] - ok["ttft_s"]) / (ok["output_tokens"] - 1)
    _check(s["latency"]["tpot"], tpot)
    _check(s["lengths"]["prompt_tokens"], ok["prompt_tokens"])
    window = (r["send_time_unix"] + r["e2e_s"].fillna(0)).max() - r["send_time_unix"].min()
    assert s["throughput"]["window_s"] == pytest.approx(window)
    assert s["throughput"]["requests_per_s"] == pytest.approx(len(ok) / window)
    assert s["throughput"]["output_tokens_per_s"] == pytest.approx(ok["output_tokens"].sum() / window)
    meeting = ok[(ok["ttft_s"] <= 0.3) & (tpot <= 0.025) & (ok["e2e_s"] <= 2.0)]
    assert s["goodput"]["requests_meeting"] == len(meeting)
    assert s["goodput"]["requests_per_s"] == pytest.approx(len(meeting) / window)
    assert s["goodput"]["attainment"] == pytest.approx(len(meeting) / len(r))
    assert s["errors"]["by_class"] == {"http_5xx": len(r) - len(ok)}
    assert s["errors"]["examples"]["http_5xx"] == "boom <b>"
    assert s["requests"] == {"total": len(r), "ok": len(ok), "failed": len(r) - len(ok)}
    assert (d / "summary.json").exists()
    # The keys `kvscope run` and harness.results users read (the harness's first summary.json):
    assert s["headline"]["ttft_p99_s"] == s["latency"]["ttft"]["p99"] and s["headline"]["req_per_s"] > 0
    assert s["client"]["ok"] == len(ok) and s["client"]["errors_by_class"] == s["errors"]["by_class"]
    assert s["client"]["ttft_s"]["p50"] == s["latency"]["ttft"]["p50"]
    assert s["server"]["prefix_hit_ratio"] == pytest.approx(0.25) and "peak_kv_usage_ratio" in s["server"]


def test_calibration_probes_are_excluded(tmp_path):
    d = make_bundle(tmp_path / "b", Spec(n_requests=50))
    b = read_bundle(d)
    req = b.requests.copy()
    req.loc[:4, "phase"] = "calibration"
    req.loc[:4, "ttft_s"] = 99.0
    rep = analyse_latency(req)
    assert rep.ttft.count == 45 and rep.ttft.max < 99.0


def test_tpot_is_per_choice_with_parallel_sampling():
    req = pd.DataFrame(
        {
            "ok": [True],
            "ttft_s": [0.1],
            "e2e_s": [1.1],
            "output_tokens": [44],
            "n": [4],
            "itl_s": [[0.1] * 10],
            "send_time_unix": [0.0],
        }
    )
    from harness.bundle.read import normalise_requests

    rep = analyse_latency(normalise_requests(req))
    assert rep.tpot.p50 == pytest.approx(1.0 / 10)  # 11 tokens per choice: 10 decode steps


def test_parse_slos_and_durations():
    assert parse_slos("ttft=1s,tpot=100ms") == Slos(ttft=1.0, tpot=0.1)
    assert parse_slos(" e2e = 2.5s , itl=50ms ") == Slos(e2e=2.5, itl=0.05)
    assert parse_slos("") == Slos() and not parse_slos(None)
    assert parse_duration("250ms") == 0.25
    assert parse_slos("ttft=1m") == Slos(ttft=60.0)  # kvscope's one duration grammar
    for bad in ("ttft=100", "foo=1s", "ttft=1s,ttft=2s", "ttft", "ttft=0ms"):
        with pytest.raises(ValueError):
            parse_slos(bad)


def test_slo_misses_count_failures_and_skip_undefined_tpot():
    from harness.bundle.read import normalise_requests

    req = normalise_requests(
        pd.DataFrame(
            {
                "ok": [True, True, False, True],
                "ttft_s": [0.1, 0.5, np.nan, 0.1],
                "e2e_s": [0.2, 0.6, 0.0, 0.1],
                "output_tokens": [11, 11, None, 1],
                "itl_s": [[0.01] * 10, [0.01] * 10, [], []],
                "send_time_unix": [0, 1, 2, 3],
            }
        )
    )
    assert meets_slos(req, Slos(ttft=0.2, tpot=0.05)).tolist() == [True, False, False, True]
    assert meets_slos(req, Slos(itl=0.005)).tolist() == [False, False, False, True]


def test_throughput_over_time_adds_up(tmp_path):
    b = read_bundle(make_bundle(tmp_path / "b", Spec(n_requests=120)))
    tp = throughput_over_time(b.requests, bin_s=2.0)
    ok = b.requests[b.requests["ok"]]
    assert (tp["requests_per_s"] * 2.0).sum() == pytest.approx(len(ok))
    assert (tp["output_tokens_per_s"] * 2.0).sum() == pytest.approx(ok["output_tokens"].sum())


def test_empty_bundle_summarises_without_crashing(tmp_path):
    d = make_bundle(tmp_path / "b", Spec(n_requests=0))
    s = summarize(d)
    assert s["requests"]["total"] == 0 and s["latency"]["ttft"]["p99"] is None
    assert s["reliable"] is False and codes(s["selfcheck"]["reasons"])[-1] == "no_success"
