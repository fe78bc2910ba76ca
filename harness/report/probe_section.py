"""The probe's capacity table as report blocks, for the run report's "Server and KV cache" part
when the bundle holds a probe.json (`kvscope probe --out BUNDLE` or `kvscope probe BUNDLE`).

Kept apart so the run report can place it wherever its sections end up: `probe_blocks(d)` is
empty for a bundle without a probe, so a caller adds it unconditionally."""

from __future__ import annotations

from pathlib import Path

from harness.bundle.errors import BundleError
from harness.probe.render import TABLE_HEAD, summary_lines, table_cells
from harness.probe.result import PROBE_JSON, ProbeResult, read_result
from harness.report.document import Block, Bullets, Para, Table

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


def probe_blocks(d: Path) -> list[Block]:
    """`capacity_blocks` of the bundle's probe.json; [] without one; a note when unreadable."""
    if not (d / PROBE_JSON).exists():
        return []
    try:
        return capacity_blocks(read_result(d))
    except (BundleError, KeyError, TypeError) as exc:
        return [Para(f"{PROBE_JSON} could not be read: {exc}")]
