"""The run report's "Capacity, measured" section, when the bundle holds a probe.json
(`kvscope probe --out BUNDLE` or `kvscope probe BUNDLE`): the measured tokens per block and
pool, the concurrency table and the probe's findings. `read_probe` loads it for the report."""

from __future__ import annotations

from pathlib import Path

from harness.bundle.errors import BundleError
from harness.probe.render import TABLE_HEAD, summary_lines, table_cells
from harness.probe.result import PROBE_JSON, ProbeResult, read_result
from harness.report.document import Block, Bullets, Para, Section, Table
from harness.report.run_report import RunReport

CAPTION = (
    "holds: requests of that length the pool holds at once, measured by the probe; stated ÷ length: "
    "the server's stated pool over the length; server's figure: its own start-up concurrency"
)


def capacity_blocks(result: ProbeResult) -> list[Block]:
    """The measured terms, the concurrency table and the findings (each with its code)."""
    blocks: list[Block] = [Para(line) for line in summary_lines(result)]
    if result.lengths_source:
        blocks.append(Para(f"Lengths: {result.lengths_source}."))
    blocks.append(Table(list(TABLE_HEAD), [table_cells(r) for r in result.concurrency], CAPTION))
    if result.findings:
        blocks.append(Bullets([f"{f.code}: {f.text}" for f in result.findings]))
    return blocks


def read_probe(d: Path) -> ProbeResult | str | None:
    """The bundle's probe.json; None without one; the reason when it cannot be read."""
    if not (d / PROBE_JSON).exists():
        return None
    try:
        return read_result(d)
    except (BundleError, KeyError, TypeError) as exc:
        return f"{PROBE_JSON} could not be read: {exc}"


def capacity_section(r: RunReport) -> Section | None:
    if r.probe is None:
        return None
    blocks = [Para(r.probe)] if isinstance(r.probe, str) else capacity_blocks(r.probe)
    return Section("Capacity, measured", blocks)
