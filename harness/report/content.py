"""The Document of one run's report: a title, then one section per function in RUN_SECTIONS.

Section order is the reader's: Advice first (what to change), then whether the measurement
can be trusted, the headline, latency, throughput, the KV cache and its effect on latency,
and the detail. Every figure comes from `summarize` (the same dict as summary.json), so the
report never computes a number the summary does not have. Adding a section is adding one
function `(RunReport) -> Section | None` (None: nothing to show for this run) to the list.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.report.advice import advice_section
from harness.report.cells import when
from harness.report.document import Document, Section
from harness.report.latency_sections import (
    kv_band_section,
    latency_section,
    preemption_section,
    summary_section,
    throughput_section,
)
from harness.report.probe_section import capacity_section
from harness.report.request_sections import errors_section, lengths_section
from harness.report.run_report import RunReport
from harness.report.selfcheck_section import selfcheck_section
from harness.report.server_sections import client_server_section, server_section
from harness.report.server_timing import server_split_section
from harness.report.session_section import sessions_section
from harness.report.verify_section import verify_section

SectionFn = Callable[[RunReport], Section | None]


def _advice(r: RunReport) -> Section:
    return advice_section(r.advice)


RUN_SECTIONS: tuple[SectionFn, ...] = (
    _advice,
    verify_section,
    selfcheck_section,
    summary_section,
    latency_section,
    throughput_section,
    server_section,
    preemption_section,
    kv_band_section,
    capacity_section,
    sessions_section,
    client_server_section,
    server_split_section,
    errors_section,
    lengths_section,
)


def run_document(r: RunReport) -> Document:
    info = r.summary["run"]
    load = f"rate {info['rate']}/s" if info.get("rate") else f"{info.get('users') or '?'} users"
    return Document(
        f"kvscope report: {info.get('workload') or 'run'} on {info.get('model') or 'unknown model'}",
        [
            f"target {info.get('target') or '?'} · {load} · started {when(info.get('start'))}",
            f"bundle {info.get('path') or '?'}",
        ],
        [section for make in RUN_SECTIONS if (section := make(r)) is not None],
    )
