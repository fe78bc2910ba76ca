"""Does the replay of a run reproduce the run? The demo configuration (scripts/demo.sh: the
bundled engine with SmolLM2-135M, a 64-block pool, 6 closed-loop users of a shared-prefix
workload), run afresh N times (a new seed each), each advised; the unchanged configuration's
replay held against what the run measured: preemptions and TTFT p99 (the server's), within 25%.

Usage: python -m benchmarks.replay_fidelity [--runs 3] [--duration 75s] [--out DIR]

Prints a Markdown table (one row per run, then how many of N were within 25% on both) and the
replay's time axis of each run (the step fit, its error and the speed drift it replayed).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.kept_table import ROOT, emit

MIN_REQUESTS = 12  # fewer completed requests than the step fit needs: the measurement broke
DEMO = (
    "--workload", "shared_prefix", "--model", "smollm2-135m", "--num-blocks", "64", "--users", "6",
    "--num-prefixes", "4", "--prefix-tokens", "192", "--suffix-tokens", "32", "--output-tokens", "48",
    "--drain-timeout", "60",
)  # fmt: skip


def run_once(out: Path, duration: str) -> None:
    """A fresh run (kept when `out` already holds one: --out of an earlier invocation)."""
    if (out / "advice.json").exists():
        return
    argv = [sys.executable, "-m", "harness.cli", "run", "--quiet", *DEMO, "--duration", duration]
    proc = subprocess.run([*argv, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"kvscope run exited {proc.returncode}: {proc.stderr[-2000:]}")


def fidelity(out: Path) -> tuple[dict, str, str]:
    """(the unchanged replay against the run, the replay's time axis, the advice's verdicts), the
    replay made even when the advice made none (a run without KV pressure is not replayed)."""
    from harness.advisor import run_inputs
    from harness.advisor.advice import diagnose_run
    from harness.advisor.evidence import workload_evidence
    from harness.advisor.whatif import make_replayer

    inputs = run_inputs.load(out)
    work = workload_evidence(inputs)
    diag = diagnose_run(inputs, work)
    mean_running, preemptions = (diag.mean_running, diag.preemptions) if diag else (None, None)
    replayer = make_replayer(inputs, work, mean_running, preemptions)
    found = replayer.fidelity()
    advice = json.loads((out / "advice.json").read_text())
    verdicts = (
        ", ".join(f"{v['action']}: {v['status']}" for v in advice["verdicts"]) or "none (no KV pressure)"
    )
    return found.to_dict() if found else {}, replayer.time_axis, verdicts


def completed_requests(out: Path) -> int:
    return int((json.loads((out / "summary.json").read_text()).get("client") or {}).get("ok") or 0)


def why_lost(out: Path) -> str:
    log = out / "logs" / "locust-worker0.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    if "heartbeat" in text:
        return "Locust's master and worker lost each other's heartbeats on the loaded machine"
    return "see its logs/"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.0%}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--duration", default="75s")
    p.add_argument(
        "--out", type=Path, help="keep the bundles here; runs it holds are reused (default: a temp folder)"
    )
    p.add_argument(
        "--write", action="store_true", help="also keep the table in benchmarks/replay_fidelity.md"
    )
    args = p.parse_args()
    base = args.out or Path(tempfile.mkdtemp(prefix="kvscope-fidelity-"))
    rows, axes, lost, within, valid, i = [], [], [], 0, 0, 0
    while valid < args.runs and i < 2 * args.runs:
        i += 1
        started = time.monotonic()
        run_once(base / f"run-{i}", args.duration)
        recorded = completed_requests(base / f"run-{i}")
        if recorded < MIN_REQUESTS:  # a broken measurement (e.g. Locust lost its worker), not a replay
            lost.append(
                f"- run {i}: only {recorded} completed requests recorded ({why_lost(base / f'run-{i}')})"
            )
            continue
        valid += 1
        f, axis, statuses = fidelity(base / f"run-{i}")
        m = f.get("measured") or {}
        within += bool(f.get("within"))
        rows.append(
            f"| {i} | {m.get('preemptions', 0):.0f} | {f.get('replayed_preemptions')} | "
            f"{_pct(f.get('preemption_error'))} | {m.get('ttft_p99_s', 0):.2f} s | "
            f"{f.get('replayed_ttft_p99_s') or 0:.2f} s | {_pct(f.get('ttft_error'))} | "
            f"{'yes' if f.get('within') else 'no'} | {statuses} | {time.monotonic() - started:.0f} s |"
        )
        axes.append(f"- run {i}: {axis}")
    body = "\n".join(
        [
            f"Demo configuration (`scripts/demo.sh`, --duration {args.duration}), {args.runs} fresh runs, "
            "each advised; the unchanged configuration's replay against the run (server TTFT).",
            "",
            "| run | preemptions measured | replayed | error | TTFT p99 measured | replayed | error | "
            "within 25% | verdicts | wall |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Within 25% on both: **{within} of {valid}**.",
            "",
            *(["Runs replaced, their measurement broken:", "", *lost, ""] if lost else []),
            "Replay time axes:",
            "",
            *axes,
        ]
    )
    command = f"python -m benchmarks.replay_fidelity --runs {args.runs} --duration {args.duration}"
    emit(body, "replay_fidelity", command, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
