"""Latency joined to server state: KV-usage bands (merge_asof), before/after preemption onset,
and per-request client vs server timing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.analysis.join import MIN_COMPARE, analyse_join, attach_server_state, split_at_preemption
from harness.analysis.server import summarise_server, timeline
from harness.analysis.summary import summarize
from harness.bundle.read import normalise_requests, normalise_server, read_bundle
from tests.harness.bundle.factory import T0, Spec, make_bundle


def test_each_request_takes_the_last_sample_at_or_before_its_send():
    srv = normalise_server(
        pd.DataFrame(
            {
                "time_unix": [10.0, 11.0, 12.0],
                "kv_usage_ratio": [0.1, 0.85, 0.99],
                "model": "m",
                "instance": "0",
                "up": True,
            }
        )
    )
    req = normalise_requests(
        pd.DataFrame(
            {"send_time_unix": [9.5, 10.0, 10.9, 11.0, 12.5, 30.0], "ok": True, "ttft_s": 0.1, "e2e_s": 0.2}
        )
    )
    j = attach_server_state(req, timeline(srv))
    assert np.isnan(
        j["kv_usage_at_send"].iloc[0]
    )  # before the first scrape: unknown, not borrowed from later
    assert j["kv_usage_at_send"].iloc[1:5].tolist() == pytest.approx([0.1, 0.1, 0.85, 0.99])
    assert np.isnan(j["kv_usage_at_send"].iloc[5])  # 18 s after the last sample: beyond the tolerance
    assert j["kv_band"].tolist() == ["unknown", "0%–50%", "0%–50%", "80%–90%", "≥95%", "unknown"]


def test_band_percentiles_match_a_groupby_by_hand(tmp_path):
    b = read_bundle(make_bundle(tmp_path / "b", Spec(n_requests=400)))
    tl = timeline(b.server)
    rep = analyse_join(b.requests, tl, summarise_server(b.server).preemption_onset_unix)
    j = attach_server_state(b.requests, tl)
    for row in rep.kv_bands:
        ttft = j.loc[(j["kv_band"] == row.band) & j["ok"], "ttft_s"].to_numpy()
        assert row.ttft.count == ttft.size
        assert row.ttft.p99 == pytest.approx(np.percentile(ttft, 99))
    assert sum(r.requests for r in rep.kv_bands) == len(b.requests)


def test_preemption_split_uses_the_first_counter_increase(tmp_path):
    s = summarize(make_bundle(tmp_path / "b", Spec(preempt_at_s=20.0)))
    assert s["server"]["preemption_onset_unix"] == pytest.approx(T0 + 20.0)
    r = pd.read_parquet(tmp_path / "b" / "requests.parquet")
    ok = r[r["ok"]]
    before = ok.loc[ok["send_time_unix"] < T0 + 20.0, "ttft_s"]
    after = ok.loc[ok["send_time_unix"] >= T0 + 20.0, "ttft_s"]
    p = s["preemption"]
    assert p["before"]["p99"] == pytest.approx(np.percentile(before, 99))
    assert p["after"]["p99"] == pytest.approx(np.percentile(after, 99))
    assert p["ttft_p99_ratio"] > 2 and p["verdict"].startswith("TTFT p99 was higher after preemptions began")


def test_no_preemptions_and_too_few_requests_say_so():
    req = normalise_requests(
        pd.DataFrame({"send_time_unix": np.arange(10.0), "ok": True, "ttft_s": 0.1, "e2e_s": 0.2})
    )
    assert split_at_preemption(req, None).verdict == "No preemptions during the run."
    few = split_at_preemption(req, 2.0)
    assert few.ttft_p99_ratio is None and f"need {MIN_COMPARE}" in few.verdict


def test_client_vs_server_per_request(tmp_path):
    b = read_bundle(make_bundle(tmp_path / "b", Spec(overhead_s=0.004, overhead_jitter_s=0.0)))
    cs = analyse_join(b.requests, timeline(b.server), None).client_server
    assert cs.available and cs.ttft_overhead.p50 == pytest.approx(0.004)
    assert cs.preempted_requests > 0 and cs.ttft_preempted.p50 > cs.ttft_not_preempted.p50
    b2 = read_bundle(make_bundle(tmp_path / "c", Spec(server_timings=False)))
    assert not analyse_join(b2.requests, timeline(b2.server), None).client_server.available


def test_band_verdict_contrasts_the_fullest_and_emptiest_band(tmp_path):
    s = summarize(make_bundle(tmp_path / "b", Spec(n_requests=400)))
    hi, lo = s["kv_bands"][-1], s["kv_bands"][0]
    assert s["kv_band_verdict"].startswith(
        f"TTFT p99 was {hi['ttft']['p99'] * 1000:.0f} ms for requests sent at KV usage {hi['band']}"
    )
    assert f"against {lo['ttft']['p99'] * 1000:.0f} ms at {lo['band']}" in s["kv_band_verdict"]
    assert s["kv_band_verdict"] in s["verdicts"]
