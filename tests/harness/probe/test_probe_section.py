"""The probe's capacity table as report blocks, for a run report whose bundle holds probe.json."""

from __future__ import annotations

from harness.probe.assemble import finish
from harness.probe.render import markdown
from harness.probe.result import write_result
from harness.probe.stated import StatedPool
from harness.report.document import Document
from harness.report.markdown import render_markdown
from harness.report.probe_section import capacity_section, read_probe
from harness.report.run_report import RunReport
from tests.harness.probe.observations import observed


def test_a_bundle_with_a_probe_gets_its_table_and_findings(tmp_path):
    assert read_probe(tmp_path) is None and capacity_section(RunReport({})) is None
    stated = StatedPool("vllm", num_blocks=64, block_size=16, max_model_len=8192)
    result = finish("http://x", stated, observed(63, 16), [], (("p90", 248),), "the run's lengths")
    write_result(tmp_path, result, markdown(result))
    md = render_markdown(Document("run", [], [capacity_section(RunReport({}, probe=read_probe(tmp_path)))]))
    assert "16 tokens per block" in md and "| p90 | 248 | 16 | 3 | 4.1 | - |" in md
    assert "null_block: the pool holds 63 x 16" in md and "Lengths: the run's lengths." in md
    (tmp_path / "probe.json").write_text("{")
    unreadable = capacity_section(RunReport({}, probe=read_probe(tmp_path)))
    assert "could not be read" in unreadable.blocks[0].text
