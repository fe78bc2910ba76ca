"""Build the Document of a sweep's report from sweep.json (see `harness.sweep`).

The sweep answers two questions first (after the advice): where is the knee, and what is the
highest load that meets the SLOs; then the table of points and the curve. Point bundles
have their own reports (point-NN/report.html), named in the table.
"""

from __future__ import annotations

from typing import Any

from harness.advisor.record import Advice
from harness.formatting import ms_cell, num, pct
from harness.report.advice import advice_blocks
from harness.report.document import Bullets, Document, Image, Para, Table
from harness.report.sweep_search import search_blocks


def sweep_document(
    sw: dict[str, Any],
    figures: dict[str, str],
    advice_markdown: str | None,
    advice: Advice | None,
) -> Document:
    cfg = sw.get("config", {})
    kind = "request rates" if cfg.get("mode") == "rate" else "concurrencies"
    doc = Document(
        f"kvscope sweep: {cfg.get('workload', '?')} over {kind}",
        [
            f"target {sw.get('target') or '?'} · {cfg.get('duration_per_point', '?')} per point · "
            f"status {sw.get('status', '?')}"
        ],
    )
    doc.section("Advice").blocks += advice_blocks(advice_markdown, advice)
    knee = sw.get("knee") or {}
    sec = doc.section("Knee and SLO limit")
    sec.blocks.append(Para(knee.get("explanation") or "no points were measured", strong=True))
    sec.blocks.append(Para(sw.get("best_explanation") or ""))
    sec.blocks.append(
        Para(
            "Knee: for each step between loads, elasticity = Δln(E2E p99) / Δln(output tok/s); "
            "the knee is the last point before the first step with elasticity > 1 "
            "(more of the added load turned into waiting than into "
            "work) or where throughput stopped growing while latency rose."
        )
    )
    if sw.get("search"):
        doc.section("Search for the highest load meeting the SLOs").blocks += search_blocks(sw, figures)
    points = sw.get("points") or []
    if any(not p["reliable"] for p in points):
        sec.blocks.append(
            Bullets(
                [
                    f"point {p['load_label']} is UNRELIABLE (the client distorted it; see its report)"
                    for p in points
                    if not p["reliable"]
                ]
            )
        )
    es = knee.get("elasticities") or []
    rows = []
    for i, p in enumerate(points):
        e = es[i - 1] if 0 < i <= len(es) else None
        rows.append(
            [
                p["load_label"],
                str(p["ok"]),
                str(p["failed"]),
                num(p["requests_per_s"]),
                num(p["output_tokens_per_s"], 1),
                ms_cell(p["ttft_p50_s"]),
                ms_cell(p["ttft_p99_s"]),
                ms_cell(p["tpot_p99_s"]),
                ms_cell(p["e2e_p99_s"]),
                "–" if e is None else f"{e:.2f}",
                pct(p["attainment"]),
                pct(p["peak_kv_usage_ratio"]),
                num(p["preemptions"], 0),
                "yes" if p["reliable"] else "NO",
                f"{p['bundle']}/report.html",
            ]
        )
    tab = doc.section("Points")
    tab.blocks.append(
        Table(
            [
                "load",
                "ok",
                "failed",
                "req/s",
                "out tok/s",
                "TTFT p50 ms",
                "TTFT p99 ms",
                "TPOT p99 ms",
                "E2E p99 ms",
                "elasticity",
                "SLO attainment",
                "KV max",
                "preemptions",
                "reliable",
                "report",
            ],
            rows,
            "elasticity: of the step from the previous point to this one",
        )
    )
    if "sweep" in figures:
        tab.blocks.append(Image(figures["sweep"], "throughput vs latency"))
    return doc
