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


def _lines(tmp_path, rows) -> str:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_session_turns_are_numbered_in_order_and_never_arrive_before_their_predecessor(tmp_path) -> None:
    rows = [
        {"arrival_s": 1.0, "session_id": "a", "turn": 1, "prompt_tokens": 80, "output_tokens": 4},
        {"arrival_s": 2.0, "session_id": "a", "turn": 0, "prompt_tokens": 40, "output_tokens": 4},
        {"arrival_s": 0.5, "prompt_tokens": 10, "output_tokens": 2},
        {"arrival_s": 1.5, "session_id": 7, "prompt_tokens": 30, "output_tokens": 4},
        {"arrival_s": 1.5, "session_id": 7, "prompt_tokens": 60, "output_tokens": 4},
        {"arrival_s": 4.0, "session_id": "a", "turn": 5, "prompt_tokens": 120, "output_tokens": 4},
    ]
    entries = load_trace(_lines(tmp_path, rows))
    got = [(e.arrival_s, e.session_id, e.turn, e.prompt_tokens) for e in entries]
    assert got == [
        (0.0, None, None, 10),
        (1.0, "7", 0, 30),  # equal times: file order
        (1.0, "7", 1, 60),
        (1.5, "a", 0, 40),
        (1.5, "a", 1, 80),  # turn 1 was due before turn 0: it waits for it
        (3.5, "a", 2, 120),  # turn numbers are made consecutive
    ]
    assert len({e.shard for e in entries if e.session_id == "a"}) == 1 and entries[0].shard is None


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"session_id": "a", "turn": 0}, {"session_id": "a", "turn": 0}], "two turns with the same number"),
        ([{"session_id": "a", "turn": 0}, {"session_id": "a"}], "numbers some of its turns"),
        ([{"session_id": ["a"]}], r"s.jsonl:1: session_id must be"),
        ([{"session_id": "a", "turn": -1}], "turn must be an integer"),
        ([{"turn": 2}], "given with a session_id"),
    ],
)
def test_bad_session_lines_are_errors_that_name_the_problem(tmp_path, rows, message) -> None:
    rows = [{"arrival_s": 0.0, "prompt_tokens": 5, "output_tokens": 1, **r} for r in rows]
    with pytest.raises(ValueError, match=message):
        load_trace(_lines(tmp_path, rows))


def test_a_sessions_turns_go_to_one_worker_whatever_their_position() -> None:
    from harness.workload.arrivals import ArrivalSchedule
    from harness.workload.trace_entry import TraceEntry

    entries = [TraceEntry(i * 0.1, 5, 1, session_id=f"s{i % 5}", turn=i // 5) for i in range(40)]
    taken = []
    for index in range(3):
        schedule = ArrivalSchedule(((e.arrival_s, e) for e in entries), 0.0, index, 3)
        taken.append([slot.payload for slot in iter(schedule.claim, None)])
    assert sorted(e.arrival_s for share in taken for e in share) == [e.arrival_s for e in entries]
    owners = {e.session_id: i for i, share in enumerate(taken) for e in share}
    assert all(owners[e.session_id] == i for i, share in enumerate(taken) for e in share)
    assert len(set(owners.values())) > 1  # and the sessions are spread over the workers
