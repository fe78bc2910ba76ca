"""The report's search section from a sweep.json: the boundary, the points in order, the spread,
a KV-bound boundary with the link to the failing point's advice, and the plot."""

from __future__ import annotations

from harness.report.markdown import render_markdown
from harness.report.sweep_content import SweepReport, sweep_document
from harness.report.sweep_search import search_figure
from harness.sweep.find_max import kv_bound
from harness.sweep.search import Boundary, Outcome


def sweep_json() -> dict:
    order = [
        Outcome(12.0, None, False, 5.0, True),
        Outcome(6.8, 1.0, True, 5.1),
        Outcome(7.5, 0.95, True, 5.2),
        Outcome(8.2, 0.7, False, 5.3),
    ]
    rows = [
        {
            "load": o.load,
            "load_kind": "rate",
            "preemptions": 0.0 if o.met else 9.0,
            "bundle": f"point-{i:02d}",
        }
        for i, o in enumerate(order)
    ]
    b = Boundary(7.5, 8.2, "bracketed within 10%: 7.5 met the SLOs, 8.2 did not")
    return {
        "config": {"mode": "rate", "workload": "rate"},
        "attainment_target": 0.9,
        "points": [],
        "search": {
            "range": [3.0, 12.0],
            "tolerance": 0.1,
            "order": [o.to_dict() for o in order],
            "boundary": b.to_dict(),
            "repeats": [{"load": 7.5, "attainment": 0.92}, {"load": 8.2, "attainment": 0.8}],
            "spread": [{"load": 7.5, "runs": 2, "attainment_min": 0.92, "attainment_max": 0.95}],
            "kv_bound": kv_bound(rows, b),
            "points_run": 6,
        },
    }


def test_the_search_section_names_the_boundary_the_order_and_a_kv_bound_end(tmp_path):
    sw = sweep_json()
    figures = search_figure(tmp_path, sw)
    assert (
        figures == {"search": "plots/search.png"}
        and (tmp_path / "plots" / "search.png").stat().st_size > 5000
    )
    md = render_markdown(sweep_document(SweepReport(sw, figures)))
    assert "## Search for the highest load meeting the SLOs" in md
    assert "bracketed within 10%: 7.5 met the SLOs, 8.2 did not" in md
    assert "KV-bound boundary: preemptions start at 8.2/s (9)" in md and "point-03/report.html" in md
    assert "stopped early" in md and "7.5: attainment 92.0% to 95.0% over 2 runs" in md
    assert "plots/search.png" in md
