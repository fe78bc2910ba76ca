"""The trace formats `replay` reads, on the synthetic samples in tests/fixtures/traces:
Mooncake JSON lines (with the prefix blocks its hash ids name) and the Azure LLM inference
trace CSV; a file in neither format, or a bad row, is an error naming the line."""

from __future__ import annotations

import json

import pytest

from harness.workload.traces import load_trace
from tests.support.paths import ROOT

TRACES = ROOT / "tests" / "fixtures" / "traces"


def test_mooncake_jsonl_keeps_times_lengths_and_hash_ids() -> None:
    entries = load_trace(TRACES / "mooncake_sample.jsonl")
    rows = [json.loads(line) for line in (TRACES / "mooncake_sample.jsonl").read_text().splitlines()]
    assert len(entries) == len(rows) == 12
    assert [e.arrival_s for e in entries] == [r["timestamp"] / 1000 for r in rows]
    assert [(e.prompt_tokens, e.output_tokens, list(e.hash_ids)) for e in entries] == [
        (r["input_length"], r["output_length"], r["hash_ids"]) for r in rows
    ]


def test_azure_csv_is_rebased_to_its_first_request() -> None:
    entries = load_trace(TRACES / "azure_llm_sample.csv")
    lines = (TRACES / "azure_llm_sample.csv").read_text().splitlines()[1:]
    assert len(entries) == len(lines) == 12 and entries[0].arrival_s == 0.0
    # 18:15:46.6805900 -> 18:15:46.7945900: 114 ms, to the 100-ns tick the format carries.
    assert entries[1].arrival_s == pytest.approx(0.114, abs=1e-6)
    assert [(e.prompt_tokens, e.output_tokens) for e in entries] == [
        (int(p), int(o)) for _, p, o in (line.split(",") for line in lines)
    ]
    assert all(e.hash_ids == () for e in entries)  # the format carries no prefix structure


def test_a_file_in_no_trace_format_or_with_a_bad_row_names_the_problem(tmp_path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("when,prompt\n1,2\n")
    with pytest.raises(ValueError, match="missing TIMESTAMP, ContextTokens, GeneratedTokens"):
        load_trace(bad)
    bad.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,40,5\nyesterday,3,4\n"
    )
    with pytest.raises(ValueError, match=r"x.csv:3"):
        load_trace(bad)
