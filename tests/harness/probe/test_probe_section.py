"""The probe's capacity table as report blocks, for a run report whose bundle holds probe.json."""

from __future__ import annotations

from harness.probe.assemble import finish
from harness.probe.render import markdown
from harness.probe.result import write_result
from harness.probe.stated import StatedPool
from harness.report.document import Document
from harness.report.markdown import render_markdown
from harness.report.probe_section import probe_blocks
from tests.harness.probe.observations import observed


def test_a_bundle_with_a_probe_gets_its_table_and_findings(tmp_path):
    assert probe_blocks(tmp_path) == []
    stated = StatedPool("vllm", num_blocks=64, block_size=16, max_model_len=8192)
    result = finish("http://x", stated, observed(63, 16), [], (("p90", 248),), "the run's lengths")
    write_result(tmp_path, result, markdown(result))
    doc = Document("run")
    doc.section("Server and KV cache").blocks += probe_blocks(tmp_path)
    md = render_markdown(doc)
    assert "16 tokens per block" in md and "| p90 | 248 | 16 | 3 | 4.1 | - |" in md
    assert "null\\_block: the pool holds 63 x 16" in md and "Lengths: the run's lengths." in md
    (tmp_path / "probe.json").write_text("{")
    assert "could not be read" in probe_blocks(tmp_path)[0].text
