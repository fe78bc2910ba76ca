"""`kvscope sweep --find-max` on the simulator (Llama 3.1 70B on four H100s, at most 16 running
requests): the search finds the highest rate meeting ttft=2s within 10% of a fine sweep's
boundary (ten points, 3 to 12 requests/s, one server for both), with at most half as many search
points; it repeats the boundary for the spread, and its report shows the search, in order,
on a plot. Constant arrivals and fixed lengths keep the two sweeps' points alike."""

from __future__ import annotations

import json

import pytest

from harness.cli import build_parser
from harness.run.config import ConfigError
from harness.sweep.config import from_args
from harness.sweep.find_max import kv_bound
from harness.sweep.search import Boundary
from tests.harness.analysis.runs import kvscope
from tests.support.servers import engine

SIM = (
    "--simulate", "--sim-model", "llama-3.1-70b", "--sim-gpu", "h100-80gb", "--tensor-parallel-size", "4",
    "--max-num-seqs", "16",
)  # fmt: skip
LOAD = (
    "--workload", "rate", "--arrival", "constant", "--length-spread", "0", "--prompt-tokens", "512",
    "--output-tokens", "128", "--duration-per-point", "6s", "--slo", "ttft=2s",
)  # fmt: skip
FINE = "3,4,5,6,7,8,9,10,11,12"


def test_find_max_needs_a_range_and_slos():
    for argv, message in (
        (["--rates", "1,2,4"], "searches a range"),
        (["--rates", "4,2"], "searches a range"),
        (["--rates", "1,8"], "needs --slo"),
        (["--rates", "1,8", "--slo", "ttft=1s", "--tolerance", "0"], "--tolerance"),
    ):
        args = build_parser().parse_args(["sweep", "--find-max", *argv])
        with pytest.raises(ConfigError, match=message):
            from_args(args)


def test_a_boundary_where_preemptions_start_is_kv_bound():
    rows = [
        {"load": 4.0, "load_kind": "rate", "preemptions": 0.0, "bundle": "point-01"},
        {"load": 4.4, "load_kind": "rate", "preemptions": 37.0, "bundle": "point-02"},
    ]
    bound = kv_bound(rows, Boundary(4.0, 4.4, "bracketed"))
    assert bound["advice"] == "point-02/advice.json" and "KV-bound boundary" in bound["explanation"]
    assert "preemptions start at 4.4/s (37)" in bound["explanation"]
    rows[0]["preemptions"] = 3.0  # preempting already where the SLOs were met: not where it ends
    assert kv_bound(rows, Boundary(4.0, 4.4, "bracketed")) is None


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("find-max")
    with engine(tmp, *SIM) as url:
        rc, log, fine_s = kvscope(
            "sweep", "--target", url, "--rates", FINE, *LOAD, "--out", str(tmp / "fine"), timeout_s=1500
        )
        assert rc == 0, log
        rc, log, search_s = kvscope(
            "sweep", "--target", url, "--find-max", "--rates", "3,12", *LOAD, "--out", str(tmp / "search"),
            timeout_s=1500,
        )  # fmt: skip
        assert rc == 0, log
    fine = json.loads((tmp / "fine" / "sweep.json").read_text())
    search = json.loads((tmp / "search" / "sweep.json").read_text())
    print(f"fine sweep {fine_s:.0f} s, best {fine['best']}; search {search_s:.0f} s")
    print(search["search"]["boundary"])
    return fine, search, log, tmp


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_the_search_finds_the_fine_sweeps_limit_in_half_the_points(sweeps):
    fine, search, log, _ = sweeps
    assert len(fine["points"]) == 10 and fine["best"] is not None
    found = search["search"]["boundary"]
    assert found["best"] is not None and found["first_failing"] is not None
    # The fine sweep knows the limit only to its bracket (its best point and the next, 1/s or
    # 11% apart here): the search's best lies within 10% of that bracket (CI once read 9.917/s
    # against the fine sweep's 9/s, whose 10/s had failed: both right)
    low = fine["best"]["load"]
    high = min((p["load"] for p in fine["points"] if p["load"] > low), default=low)
    assert 0.9 * low <= found["best"] <= 1.1 * high, (found, fine["best"], high)
    assert len(search["search"]["order"]) <= len(fine["points"]) // 2
    assert found["first_failing"] / found["best"] <= 1.1 * 1.001  # bracketed within the tolerance
    assert found["reason"] in log


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_the_boundary_is_repeated_and_the_report_plots_the_search(sweeps):
    _, search, _, tmp = sweeps
    s = search["search"]
    assert {r["load"] for r in s["repeats"]} == {s["boundary"]["best"], s["boundary"]["first_failing"]}
    assert [sp["runs"] for sp in s["spread"]] == [2, 2]
    assert s["points_run"] == len(s["order"]) + 2
    for row in search["points"] + s["repeats"]:
        assert (tmp / "search" / row["bundle"] / "report.html").exists()
    md = (tmp / "search" / "report.md").read_text()
    assert "Search for the highest load meeting the SLOs" in md and "plots/search.png" in md
    assert (tmp / "search" / "plots" / "search.png").stat().st_size > 10_000
