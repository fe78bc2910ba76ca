"""The "Measurement self-check" section: whether the client distorted the numbers, the
figures that decide it, its notes, and how the run ended when it did not simply complete."""

from __future__ import annotations

from typing import Any

from harness.bundle.finding import texts
from harness.formatting import DASH, ms_cell, pct
from harness.report.document import Bullets, Para, Section, Table
from harness.report.run_report import RunReport

RELIABLE = "Reliable: the client kept up (no sign it distorted the numbers)."
UNRELIABLE = "UNRELIABLE: the client distorted these numbers."


def _bunched(b: dict[str, Any]) -> str:
    share = b.get("bunched_share")
    return DASH if share is None else f"{pct(share)} of {b.get('gaps')} ({b.get('cause')})"


def _figures(check: dict[str, Any]) -> Table:
    return Table(
        ["check", "value"],
        [
            ["method", check["method"]],
            ["client delay floor (network + parsing)", f"{ms_cell(check['delay_floor_s'])} ms"],
            [
                "client lag p50 / p99 (above the floor)",
                f"{ms_cell(check['lag_p50_s'])} / {ms_cell(check['lag_p99_s'])} ms",
            ],
            ["TTFT p99 moved by the client", f"{ms_cell(check['ttft_p99_distortion_s'])} ms"],
            ["E2E p99 moved by the client", f"{ms_cell(check['e2e_p99_distortion_s'])} ms"],
            ["open-loop schedule lag p99", f"{ms_cell(check['schedule_lag_p99_s'])} ms"],
            ["load-generator CPU warnings", str(len(check["cpu_warnings"]))],
            ["inter-token gaps under 1 ms (bunched; cause)", _bunched(check.get("bunching") or {})],
        ],
    )


def selfcheck_section(r: RunReport) -> Section:
    s = r.summary
    check, info = s["selfcheck"], s["run"]
    sec = Section("Measurement self-check")
    if s["reliable"]:
        sec.blocks.append(Para(RELIABLE, strong=True))
    else:
        sec.blocks += [Para(UNRELIABLE, strong=True), Bullets(texts(check["reasons"]))]
    sec.blocks.append(_figures(check))
    if check["notes"]:
        sec.blocks.append(Bullets(texts(check["notes"])))
    if info.get("notes") or info.get("status") not in (None, "completed"):
        sec.blocks.append(Para(f"Run status: {info.get('status') or '?'}; the harness noted:"))
        sec.blocks.append(Bullets(texts(info.get("notes")) or ["(nothing)"]))
    return sec
