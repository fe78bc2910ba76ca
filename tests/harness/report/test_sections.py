"""report.md and report.html come from the same blocks: the same section titles, sub-headings
and tables in both, the sections the report had before it was built from blocks, and no
Markdown parser anywhere in the report package (the sweep's report: test_html.py)."""

from __future__ import annotations

import json
from typing import get_args

from harness.advisor.record import Advice, Verdict
from harness.bundle.finding import Finding
from harness.report import html, markdown
from harness.report.document import Block
from harness.report.write import write_report
from tests.harness.bundle.factory import Spec, make_bundle
from tests.harness.report.outline import html_outline, markdown_outline, titles
from tests.harness.report.sections_before import RUN_SECTIONS, RUN_TABLES


def _tables_by_section(outline) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {}
    section = None
    for item in outline:
        if item[0] == "h2":
            section = item[1]
        elif item[0] == "table":
            out.setdefault(section, []).append(item[1])
    return out


def _advice() -> Advice:
    verdicts = [
        Verdict(
            "quantize_kv_cache",
            "Quantize the KV cache to fp8 | now",
            {"preemptions": 12, "pool_blocks": 40, "kv_cache_dtype": "bfloat16"},
            {},
            "the same memory holds twice the blocks",
            True,
            replay={
                "change": {"label": "kv_cache_dtype=fp8"},
                "baseline": {"preemptions": 12},
                "changed": {"preemptions": 0},
                "why": {"code": "fewer_preemptions", "text": "fewer"},
            },
            status="verified",
        ),  # fmt: skip
        Verdict("cut_context", "Cut max_model_len to 3,072", {"max_model_len": 8192}, {}, "fewer", False),
    ]
    notes = [Finding("no_kv_pressure", "a note with *stars* and `ticks` and <tags>")]
    diagnosis = {"kv_pressure": True, "preemption_level": "act"}
    return Advice("b", {}, diagnosis, {}, verdicts, notes, "the run's own seconds")


def test_markdown_and_html_have_the_same_sections_and_tables_as_before(tmp_path):
    d = make_bundle(tmp_path / "b", Spec(model="<m>|x", target="http://t/*a*", error_every=7))
    (d / "advice.json").write_text(json.dumps(_advice().to_json()))
    page = write_report(d).read_text()
    md, hm = markdown_outline((d / "report.md").read_text()), html_outline(page)
    assert md == hm  # every heading, sub-heading and table cell, in order
    assert titles(md) == RUN_SECTIONS
    assert titles(md, "h3") == [
        "1. Quantize the KV cache to fp8 | now (quantize_kv_cache, verified by replay)",
        "2. Cut max_model_len to 3,072 (cut_context, not replayed)",
    ]
    tables = _tables_by_section(md)
    assert tables.pop("Advice") == [["quantity", "value"], ["quantity", "value"]]  # one per verdict
    assert tables == RUN_TABLES


def test_a_bundle_without_advice_or_server_samples_keeps_both_renderings_alike(tmp_path):
    import pandas as pd

    d = make_bundle(tmp_path / "b", Spec(n_requests=30, preempt_at_s=None))
    pd.DataFrame().to_parquet(d / "server.parquet")
    page = write_report(d).read_text()
    md = markdown_outline((d / "report.md").read_text())
    assert md == html_outline(page)
    assert titles(md)[:2] == ["Advice", "Measurement self-check"] and set(titles(md)) <= set(RUN_SECTIONS)


def test_no_markdown_parser_is_left_in_the_report_package():
    blocks = set(get_args(Block))
    for render in (markdown.block_lines, html.block_html):
        assert set(render.registry) - {object} == blocks  # one function per block type
    assert not hasattr(html, "markdown_to_html") and "re" not in vars(html)  # nothing parses text
