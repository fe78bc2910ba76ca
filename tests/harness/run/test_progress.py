"""The live progress line: counts from the records file as it grows, warm-up apart, and the
closing line only when something new came in (it used to print the last line twice)."""

from __future__ import annotations

import json

from harness.run.progress import JsonlTail, Progress


def _append(path, *records) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def test_the_closing_line_is_printed_only_when_it_says_something_new(tmp_path):
    records = tmp_path / "records.jsonl"
    records.write_text("")
    progress = Progress(JsonlTail(records), tmp_path / "status.json", tmp_path / "exporter", warmup_s=5.0)
    ok = {
        "phase": "measure",
        "ok": True,
        "send_time_unix": 1.0,
        "e2e_s": 0.5,
        "ttft_s": 0.1,
        "output_tokens": 4,
    }
    _append(records, {**ok, "phase": "warmup"}, ok)
    line = progress.line(now=2.0)
    assert "ok 1 failed 0" in line and line.endswith("| warm-up 1")
    assert progress.final_line(now=3.0) is None  # nothing new: the last line stands
    _append(records, {**ok, "ok": False})
    assert "ok 1 failed 1" in (progress.final_line(now=4.0) or "")
