"""The report's "Advice checked on the server" section (`kvscope advise --verify`): per verdict
whose change was applied, predicted against measured side by side (the run as it was, the
unchanged configuration rerun, the replay's prediction, the rerun with the change, and the
error), a figure of the same for preemptions, TTFT p99 and the prefix hit ratio (drawn with
the report's other figures: `verify_figures`), and the verdicts that could not be applied,
with why. No section when no verdict has a check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from harness.advisor.check_text import fmt, reason_text
from harness.advisor.record import Advice
from harness.report.document import Block, Bullets, Image, Para, Section, Table
from harness.report.plots import save
from harness.report.run_report import RunReport

TITLE = "Advice checked on the server"
ROWS = ("preemptions", "ttft_p50_s", "ttft_p99_s", "output_tokens_per_s", "prefix_hit_ratio")
PLOTTED = (
    ("preemptions", "preemptions", 1.0),
    ("ttft_p99_s", "TTFT p99 (s)", 1.0),
    ("prefix_hit_ratio", "prefix hit ratio (%)", 100.0),
)
SERIES = (
    ("as_run", "as run"),
    ("baseline", "rerun unchanged"),
    ("predicted", "predicted"),
    ("measured", "measured"),
)
PLOT_FILE = "plots/verify.png"
FIGURE = "verify"


def _applied(advice: Advice) -> list[tuple[str, dict[str, Any]]]:
    return [(v.action, v.check) for v in advice.verdicts if v.check and v.check.get("measured")]


def verify_plot(checks: list[tuple[str, dict[str, Any]]], path: Path) -> Path | None:
    if not checks:
        return None
    fig = Figure(figsize=(4.2 * len(PLOTTED), 3.4))
    axes = fig.subplots(1, len(PLOTTED))
    width = 0.8 / len(SERIES)
    x = np.arange(len(checks))
    for ax, (metric, label, scale) in zip(axes, PLOTTED):
        for i, (key, name) in enumerate(SERIES):
            values = [((c.get(key) or {}).get(metric)) for _, c in checks]
            heights = [np.nan if v is None else float(v) * scale for v in values]
            ax.bar(x + (i - (len(SERIES) - 1) / 2) * width, heights, width, label=name)
        ax.set_xticks(x, [a for a, _ in checks], fontsize=8)
        ax.set_title(label)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(SERIES), fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    return save(fig, path)


def verify_figures(advice: Advice | None, folder: Path) -> dict[str, str]:
    """{"verify": the figure's path in the folder} when some verdict's change was measured."""
    checks = _applied(advice) if advice is not None else []
    return {FIGURE: PLOT_FILE} if verify_plot(checks, folder / PLOT_FILE) is not None else {}


def verify_section(r: RunReport) -> Section | None:
    advice = r.advice
    if advice is None or not any(v.check for v in advice.verdicts):
        return None
    checks = _applied(advice)
    rows = [
        [
            action,
            metric,
            *(fmt(metric, (c.get(k) or {}).get(metric)) for k, _ in SERIES),
            fmt(metric, (c.get("error") or {}).get(metric)),
            c["status"] if metric == c.get("decided_by") else "",
        ]
        for action, c in checks
        for metric in ROWS
    ]
    blocks: list[Block] = [
        Para(
            "Each verdict's change was applied as the engine's own flags, the server restarted with it "
            "and the same load test rerun (same seed, users and duration); the unchanged configuration "
            "was rerun once to measure the run-to-run noise. Error is predicted minus measured; the "
            "status is decided on the marked metric (confirmed: the measured effect goes the predicted "
            "way by more than the noise)."
        )
    ]
    if rows:
        headers = ["verdict", "metric", *(n for _, n in SERIES), "error", "status"]
        blocks.append(Table(headers, rows))
    if FIGURE in r.figures:
        blocks.append(Image(r.figures[FIGURE], "predicted against measured, per verdict"))
    misses = [
        f"{action}: {m['subject']} predicted {fmt(m['subject'], m['predicted'])}, measured "
        f"{fmt(m['subject'], m['measured'])}: {m['text']}"
        for action, c in checks
        for m in c.get("misses") or []
    ]
    if misses:
        blocks += [Para("Predictions off by more than 30%, and the likeliest cause:"), Bullets(misses)]
    others = [
        f"{v.action}: {v.check['status']}: {reason_text(v.check)}"
        for v in advice.verdicts
        if v.check and not v.check.get("measured")
    ]
    if others:
        blocks.append(Bullets(others))
    return Section(TITLE, blocks)
