"""`write_report(dir)`: report.md, a self-contained report.html and plots/ for a run or a sweep.

A folder with sweep.json is a sweep (see `harness.sweep`); otherwise it is a run bundle.
The "## Advice" section comes first: the `advice` the advisor passes, else advice.json when
the folder has one, else a note saying how to get advice. Writing is idempotent: the files
are rewritten from the bundle each time, never appended to.
"""

from __future__ import annotations

from pathlib import Path

from harness.advisor.record import Advice
from harness.analysis.slo import Slos


def write_report(directory: str | Path, advice: Advice | None = None, slos: Slos | str | None = None) -> Path:
    """Write the report files into `directory`; returns the path of report.html."""
    from harness.report.build import build_document
    from harness.report.html import render_html
    from harness.report.markdown import render_markdown

    d = Path(directory)
    doc = build_document(d, advice, slos)
    (d / "report.md").write_text(render_markdown(doc), encoding="utf-8")
    out = d / "report.html"
    out.write_text(render_html(doc, d), encoding="utf-8")
    return out
