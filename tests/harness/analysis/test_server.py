"""Server side over time: counter deltas (restarts never negative), windowed ratios, onset."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.analysis.server import counter_increase, select_series, summarise_server, timeline
from harness.bundle.read import normalise_server
from tests.harness.bundle.factory import Spec, make_frames


def test_counter_increase_treats_a_drop_as_a_restart():
    inc = counter_increase(pd.Series([5.0, 7.0, np.nan, 10.0, 2.0, 4.0]))
    assert inc.tolist()[:2] == [0.0, 2.0] and np.isnan(inc.iloc[2])
    assert inc.tolist()[3:] == [3.0, 2.0, 2.0]
    assert (inc.dropna() >= 0).all()


def _server(values: dict, times=None) -> pd.DataFrame:
    n = len(next(iter(values.values())))
    base = {
        "time_unix": times if times is not None else np.arange(n, dtype=float),
        "model": "m",
        "instance": "0",
        "target": "t",
        "up": True,
    }
    return normalise_server(pd.DataFrame({**base, **values}))


def test_windowed_hit_ratio_and_rates_from_deltas():
    # Hits were high before the run (cumulative 900/1000) but are 10 % during it: deltas, not totals.
    q = 1000.0 + np.arange(0, 21) * 100.0
    h = 900.0 + np.arange(0, 21) * 10.0
    pre = np.array([3.0] * 10 + [3.0 + k for k in range(1, 12)])
    tl = timeline(
        _server(
            {
                "prefix_cache_queries_tokens": q,
                "prefix_cache_hits_tokens": h,
                "preemptions": pre,
                "generation_tokens": np.arange(21) * 50.0,
                "kv_usage_ratio": np.linspace(0, 1, 21),
            }
        ),
        window_s=5.0,
    )
    assert tl["prefix_hit_ratio"].iloc[1:].to_numpy() == pytest.approx(0.1)
    assert tl["generation_tokens_per_s"].iloc[-1] == pytest.approx(50.0)
    assert tl["preemptions_per_s"].iloc[-1] == pytest.approx(1.0)
    s = summarise_server(
        _server({"prefix_cache_queries_tokens": q, "prefix_cache_hits_tokens": h, "preemptions": pre})
    )
    assert s.prefix_hit_ratio == pytest.approx(0.1)
    assert s.preemptions == 11.0
    assert s.preemption_onset_unix == 10.0  # first *increase*; the counter was already 3 at the start


def test_restart_mid_run_never_gives_negative_figures():
    run, _, srv = make_frames(Spec(counter_reset_at_s=25.0))
    tl = timeline(normalise_server(srv))
    assert (tl["preemptions_delta"] >= 0).all()
    assert (tl["preemptions_per_s"].dropna() >= 0).all()
    assert tl["prefix_hit_ratio"].dropna().between(0, 1).all()
    s = summarise_server(normalise_server(srv))
    assert s.preemptions is not None and s.preemptions > 0


def test_down_samples_are_ignored_and_instances_aggregate():
    srv = _server(
        {"kv_usage_ratio": [0.2, 0.4, 0.6, 0.8], "requests_running": [1, 2, 3, 4]}, times=[0.0, 0.0, 1.0, 1.0]
    )
    srv["instance"] = ["0", "1", "0", "1"]
    one = select_series(srv)
    assert one["kv_usage_ratio"].tolist() == pytest.approx([0.3, 0.7])
    assert one["requests_running"].tolist() == [3, 7]
    srv.loc[2:3, "up"] = False
    assert len(select_series(srv)) == 1
    with_all = pd.concat([srv, _server({"kv_usage_ratio": [0.5]}).assign(instance="all")])
    assert select_series(normalise_server(with_all))["instance"].unique().tolist() == ["all"]


def test_no_samples_gives_an_empty_summary():
    s = summarise_server(normalise_server(pd.DataFrame()))
    assert s.samples == 0 and s.peak_kv_usage_ratio is None and s.preemption_onset_unix is None
