"""`kvscope run --verify` on the bundled engine (tiny-random on CPU, a 40-block pool that 16
closed-loop users overrun): every verdict is applied as the engine's own flags and the same
workload rerun with the same seed; add_memory's measured preemptions fall, its prediction is
scored against the measurement (within 30%, or the miss says by how much and why), the noise is
measured by rerunning the unchanged configuration, and the report shows predicted against
measured. Ctrl-C during the loop stops every server it started."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from harness.run.commands import kvscope_command
from harness.verify.measure import METRICS
from tests.support.paths import ROOT
from tests.support.servers import kvscope_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

RUN = (
    "--workload", "long_context", "--users", "16", "--duration", "15s", "--prompt-tokens", "64",
    "--output-tokens", "96", "--num-blocks", "40", "--max-num-seqs", "16", "--model", "tiny-random",
)  # fmt: skip


@pytest.fixture(scope="module")
def verified(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("verify") / "b"
    rc, log, _ = kvscope_run("--verify", *RUN, "--out", str(out), timeout_s=800)
    assert rc == 0, log
    return out, log


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_every_verdict_is_applied_with_the_engines_flags_and_the_same_workload(verified) -> None:
    out, log = verified
    run, advice = _json(out / "run.json"), _json(out / "advice.json")
    assert advice["verdicts"] and all(v.get("check") for v in advice["verdicts"])
    by_action = {v["action"]: v for v in advice["verdicts"]}
    add = by_action["add_memory"]
    assert add["check"]["change"]["flags"] == ["--num-blocks", str(add["projected"]["pool_blocks"])]
    rerun = _json(out / "verify" / "add_memory" / "run.json")
    assert rerun["seed"] == run["seed"] and rerun["config"]["users"] == 16
    blocks = str(add["projected"]["pool_blocks"])
    assert rerun["config"]["engine_argv"] == ["--max-num-seqs", "16", "--num-blocks", blocks]
    baseline = _json(out / "verify" / "baseline" / "run.json")["config"]["engine_argv"]
    assert baseline == run["config"]["engine_argv"] == ["--num-blocks", "40", "--max-num-seqs", "16"]
    for v in advice["verdicts"]:
        assert f"kvscope verify: {v['action']} (" in log  # one console line per verdict


def test_add_memory_cuts_the_measured_preemptions_and_its_prediction_is_scored(verified) -> None:
    out, _ = verified
    check = {v["action"]: v for v in _json(out / "advice.json")["verdicts"]}["add_memory"]["check"]
    assert set(check["error"]) == set(METRICS) and set(check["noise"]) == set(METRICS)
    assert check["baseline"]["preemptions"] > 0 and check["as_run"]["preemptions"] > 0
    assert check["measured"]["preemptions"] < check["as_run"]["preemptions"]
    assert (
        check["status"] == "confirmed"
        and check["confirmed"]
        and check["reason"]["code"] == "verify_confirmed"
    )
    missed = {m["subject"]: m for m in check["misses"]}
    for metric in ("preemptions", "ttft_p99_s"):
        predicted, measured = check["predicted"][metric], check["measured"][metric]
        assert check["error"][metric] == pytest.approx(predicted - measured)
        within = abs(predicted - measured) <= 0.3 * abs(measured)
        assert within or (metric in missed and missed[metric]["text"]), (metric, check)


def test_the_report_shows_predicted_against_measured(verified) -> None:
    out, _ = verified
    report = (out / "report.md").read_text()
    assert "## Advice checked on the server" in report and "(plots/verify.png)" in report
    assert (out / "plots" / "verify.png").stat().st_size > 0
    assert "Checked on the server: add_memory (--num-blocks" in report


def test_ctrl_c_stops_the_loop_and_every_server_it_started(verified, tmp_path: Path) -> None:
    src, _ = verified
    folder = tmp_path / "b"
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("verify"))
    proc = subprocess.Popen(
        kvscope_command("advise", str(folder), "--verify"),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    records = folder / "verify" / "baseline" / "raw" / "records.jsonl"
    seen: set[int] = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            seen |= {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            break
        if records.exists() and len(records.read_text().splitlines()) >= 3:
            break
        time.sleep(0.3)
    assert proc.poll() is None and len(seen) >= 3, proc.stdout.read()  # kvscope run, its engine, Locust
    proc.send_signal(2)  # SIGINT, as Ctrl-C
    log, _ = proc.communicate(timeout=180)
    assert proc.returncode == 130, log
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in seen):
        time.sleep(0.2)
    alive = [p for p in seen if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, [psutil.Process(p).cmdline() for p in alive]
    checks = [v.get("check") for v in _json(folder / "advice.json")["verdicts"]]
    assert not any(checks)  # interrupted during the baseline: no verdict was rerun
