"""The run report's request sections: the errors by class, and the request lengths against
the workload's targets."""

from __future__ import annotations

from harness.formatting import num, pct
from harness.report.cells import DIST_HEADERS
from harness.report.document import Para, Section, Table
from harness.report.run_report import RunReport


def errors_section(r: RunReport) -> Section:
    err = r.summary["errors"]
    if not err["failed"]:
        return Section("Errors", [Para(f"No errors in {err['total']} requests.")])
    table = Table(
        ["error class", "requests", "example message"],
        [[k, str(v), err["examples"].get(k, "")] for k, v in err["by_class"].items()],
        f"{err['failed']} of {err['total']} failed ({pct(err['error_rate'])})",
    )
    return Section("Errors", [table])


def lengths_section(r: RunReport) -> Section:
    ln = r.summary["lengths"]
    rows = [
        [
            name,
            str(d["count"]),
            num(d["mean"], 1),
            num(d["p50"], 0),
            num(d["p90"], 0),
            num(d["p99"], 0),
            num(d["max"], 0),
        ]
        for name, d in (("prompt tokens", ln["prompt_tokens"]), ("output tokens", ln["output_tokens"]))
    ]
    sources = ", ".join(f"{k} {v}" for k, v in ln["usage_sources"].items()) or "–"
    caption = (
        f"achieved / target, median: prompt {num(ln.get('prompt_median_ratio'))}, "
        f"output {num(ln.get('output_median_ratio'))}; token counts from: {sources}"
    )
    return Section(
        "Request lengths", [Table(DIST_HEADERS[:2] + ["mean", "p50", "p90", "p99", "max"], rows, caption)]
    )
