"""`kvscope sweep`: the knee and SLO-limit definitions on constructed curves, the command line,
and a real three-point sweep on the bundled engine that finishes and names a knee."""

from __future__ import annotations

import json
import math

import pytest

from harness.analysis.knee import elasticity, find_knee, highest_meeting
from harness.cli import build_parser
from harness.run.engine_flags import engine_argv
from harness.sweep.config import run_args
from tests.harness.analysis.runs import kvscope


def test_linear_region_has_no_knee():
    k = find_knee([100, 200, 400, 800], [1.0, 1.05, 1.1, 1.2], ["1", "2", "4", "8"])
    assert k.index is None and "no knee up to load 8" in k.explanation
    assert all(e is not None and e < 1 for e in k.elasticities)


def test_knee_is_the_point_before_latency_outgrows_throughput():
    # throughput x2 then +10 %, latency flat then x3: the second step has elasticity ln3/ln1.1 = 11.5
    k = find_knee([100, 200, 220], [1.0, 1.1, 3.3], ["1", "4", "16"])
    assert k.index == 1 and "knee at load 4" in k.explanation
    assert k.elasticities[1] == pytest.approx(math.log(3.0) / math.log(1.1))


def test_stalled_throughput_with_rising_latency_is_a_knee():
    assert elasticity(100, 100.5, 1.0, 2.0) == math.inf
    assert find_knee([100, 100.5], [1.0, 2.0]).index == 0
    assert elasticity(100, 100.5, 1.0, 1.0) == 0.0


def test_latency_noise_below_50ms_is_not_a_knee():
    assert find_knee([10, 12], [0.008, 0.020]).index is None  # x2.5 of a few ms is noise
    assert find_knee([10], [1.0]).index is None


def test_highest_load_meeting_the_slos():
    assert highest_meeting([1.0, 0.95, 0.5, 0.91], 0.9) == 3
    assert highest_meeting([0.5, None], 0.9) is None


def test_command_line_forwards_engine_and_workload_flags():
    args = build_parser().parse_args(
        [
            "sweep",
            "--concurrency",
            "1,4",
            "--num-blocks",
            "12",
            "--simulate",
            "--engine-seed",
            "3",
            "--output-tokens",
            "16",
            "--workload",
            "shared_prefix",
        ]
    )
    assert args.concurrency == [1.0, 4.0]
    assert engine_argv(args) == ["--num-blocks", "12", "--simulate", "--seed", "3"]
    assert run_args(args) == ["--output-tokens", "16", "--workers", "1"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--rates", "1,-2"])
    rc, out, _ = kvscope(
        "sweep", "--concurrency", "1", "--workload", "chat", "--prefix-tokens", "9", timeout_s=60
    )
    assert rc == 2 and "has no option(s) --prefix-tokens" in out


def test_help_explains_the_knee():
    rc, out, _ = kvscope("sweep", "--help", timeout_s=60)
    assert rc == 0 and "elasticity" in out and "knee" in out and "--attainment" in out


@pytest.mark.slow
def test_three_point_sweep_on_the_bundled_engine_names_a_knee(tmp_path):
    out = tmp_path / "sweep"
    args = [
        "sweep",
        "--concurrency",
        "1,8,64",
        "--duration-per-point",
        "10s",
        "--workload",
        "shared_prefix",
        "--output-tokens",
        "32",
        "--slo",
        "ttft=2s",
        "--out",
        str(out),
    ]
    # The user's path: the sweep starts the bundled engine once and reuses it for every point.
    rc, log, seconds = kvscope(*args, "--model", "tiny-random", timeout_s=420)
    assert rc == 0, log
    sw = json.loads((out / "sweep.json").read_text())
    assert sw["status"] == "completed" and [p["load"] for p in sw["points"]] == [1, 8, 64]
    assert all(p["ok"] > 0 for p in sw["points"])
    assert sw["knee"]["index"] is not None, sw["knee"]
    assert sw["knee"]["explanation"].startswith("knee at load") and sw["knee"]["explanation"] in log
    md = (out / "report.md").read_text()
    assert sw["knee"]["explanation"] in md.replace("\\", "")
    assert (out / "plots" / "sweep.png").exists() and (out / "point-00" / "report.html").exists()
    print(f"sweep took {seconds:.0f} s; {sw['knee']['explanation']}")
