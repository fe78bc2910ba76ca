"""Findings: every code the harness emits is registered, the README lists exactly the
registry, and findings written before codes existed still read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.bundle.finding import Finding, codes, read_findings, texts
from harness.bundle.finding_codes import CODES, UNCODED, markdown_table
from tests.support.paths import ROOT


def _finding_calls() -> list[tuple[str, ast.Call]]:
    calls = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if path.name == "finding.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Finding":
                calls.append((f"{path.relative_to(ROOT)}:{node.lineno}", node))
    return calls


def test_every_finding_the_harness_makes_names_a_registered_code_and_every_code_is_made():
    made = set()
    for where, call in _finding_calls():
        code = call.args[0] if call.args else None
        assert isinstance(code, ast.Constant) and isinstance(code.value, str), f"{where}: code not a literal"
        assert code.value in CODES, f"{where}: {code.value!r} is not in finding_codes.CODES"
        made.add(code.value)
    assert made == set(CODES) - {UNCODED}, set(CODES) - {UNCODED} ^ made


def test_the_readme_lists_exactly_the_registered_codes():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Finding codes\n", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|")) + "\n"
    assert table == markdown_table(), "regenerate it: python -m harness.bundle.finding_codes"
    assert all(code.isidentifier() and code == code.lower() for code in CODES)


def test_an_unregistered_code_is_refused():
    with pytest.raises(ValueError, match="not in"):
        Finding("made_up_code", "text")


def test_findings_written_before_codes_or_by_a_newer_version_still_read():
    old = ["the exporter did not come up", {"code": "exporter_down", "text": "down", "subject": None}]
    newer = {"code": "a_code_from_the_future", "text": "kept", "subject": "TTFT"}
    assert read_findings([*old, newer]) == [
        Finding(UNCODED, "the exporter did not come up"),
        Finding("exporter_down", "down"),
        Finding(UNCODED, "kept", "TTFT"),
    ]
    assert texts(old) == ["the exporter did not come up", "down"] and codes(None) == []
    assert Finding("client_lag_moved_p99", "x", "TTFT").to_dict() == {
        "code": "client_lag_moved_p99",
        "text": "x",
        "subject": "TTFT",
    }
    assert "subject" not in Finding("no_success", "x").to_dict()


def test_a_legacy_summary_still_judges_and_prints(tmp_path: Path):
    """summary.json from before codes (strings) through the run's outcome and console line."""
    from harness.run.console import self_check_line
    from harness.run.outcome import judge

    legacy = {
        "errors": {"total": 10, "failed": 0},
        "reliable": False,
        "selfcheck": {"reasons": ["the client read late"], "notes": ["a note"]},
    }
    outcome = judge(legacy, fail_on_unreliable=True)
    assert outcome.reason.code == "unreliable_measurement" and "the client read late" in outcome.reason.text
    assert self_check_line(legacy) == "self-check: UNRELIABLE: the client read late\n  note: a note"
