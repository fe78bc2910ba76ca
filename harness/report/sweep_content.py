"""The Document of a sweep's report, from sweep.json (see `harness.sweep`).

The sweep answers two questions first (after the advice): where is the knee, and what is the
highest load that meets the SLOs; then the table of points and the curve. Point bundles
have their own reports (point-NN/report.html), named in the table. As for a run, each
section is one function of the `SweepReport` in SWEEP_SECTIONS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.advisor.record import Advice
from harness.formatting import ms_cell, num, pct
from harness.report.advice import advice_section
from harness.report.document import Bullets, Document, Image, Para, Section, Table

KNEE_RULE = (
    "Knee: for each step between loads, elasticity = Δln(E2E p99) / Δln(output tok/s); "
    "the knee is the last point before the first step with elasticity > 1 "
    "(more of the added load turned into waiting than into "
    "work) or where throughput stopped growing while latency rose."
)
POINT_HEADERS = ["load", "ok", "failed", "req/s", "out tok/s", "TTFT p50 ms", "TTFT p99 ms",
                 "TPOT p99 ms", "E2E p99 ms", "elasticity", "SLO attainment", "KV max", "preemptions",
                 "reliable", "report"]  # fmt: skip


@dataclass(frozen=True, slots=True)
class SweepReport:
    sweep: dict[str, Any]  # sweep.json
    figures: dict[str, str] = field(default_factory=dict)
    advice: Advice | None = None


def _advice(r: SweepReport) -> Section:
    return advice_section(r.advice)


def knee_section(r: SweepReport) -> Section:
    knee = r.sweep.get("knee") or {}
    sec = Section(
        "Knee and SLO limit",
        [
            Para(knee.get("explanation") or "no points were measured", strong=True),
            Para(r.sweep.get("best_explanation") or ""),
            Para(KNEE_RULE),
        ],
    )
    unreliable = [p for p in r.sweep.get("points") or [] if not p["reliable"]]
    if unreliable:
        sec.blocks.append(
            Bullets(
                [
                    f"point {p['load_label']} is UNRELIABLE (the client distorted it; see its report)"
                    for p in unreliable
                ]
            )
        )
    return sec


def _point_row(p: dict[str, Any], elasticity: float | None) -> list[str]:
    return [
        p["load_label"],
        str(p["ok"]),
        str(p["failed"]),
        num(p["requests_per_s"]),
        num(p["output_tokens_per_s"], 1),
        ms_cell(p["ttft_p50_s"]),
        ms_cell(p["ttft_p99_s"]),
        ms_cell(p["tpot_p99_s"]),
        ms_cell(p["e2e_p99_s"]),
        "–" if elasticity is None else f"{elasticity:.2f}",
        pct(p["attainment"]),
        pct(p["peak_kv_usage_ratio"]),
        num(p["preemptions"], 0),
        "yes" if p["reliable"] else "NO",
        f"{p['bundle']}/report.html",
    ]


def points_section(r: SweepReport) -> Section:
    es = (r.sweep.get("knee") or {}).get("elasticities") or []
    rows = [
        _point_row(p, es[i - 1] if 0 < i <= len(es) else None)
        for i, p in enumerate(r.sweep.get("points") or [])
    ]
    sec = Section(
        "Points", [Table(POINT_HEADERS, rows, "elasticity: of the step from the previous point to this one")]
    )
    if "sweep" in r.figures:
        sec.blocks.append(Image(r.figures["sweep"], "throughput vs latency"))
    return sec


SWEEP_SECTIONS: tuple[Callable[[SweepReport], Section | None], ...] = (_advice, knee_section, points_section)


def sweep_document(r: SweepReport) -> Document:
    cfg = r.sweep.get("config", {})
    kind = "request rates" if cfg.get("mode") == "rate" else "concurrencies"
    return Document(
        f"kvscope sweep: {cfg.get('workload', '?')} over {kind}",
        [
            f"target {r.sweep.get('target') or '?'} · {cfg.get('duration_per_point', '?')} per point · "
            f"status {r.sweep.get('status', '?')}"
        ],
        [section for make in SWEEP_SECTIONS if (section := make(r)) is not None],
    )
