"""When requests leave: open-loop schedules across workers, traces, user-count profiles."""

from __future__ import annotations

import pytest

from harness.workload.arrivals import ArrivalSchedule, constant_offsets, make_offsets
from harness.workload.profiles import step_and_spike_users
from harness.workload.traces import load_trace, trace_offsets


def test_schedule_shards_are_disjoint_and_cover_the_global_schedule() -> None:
    glob = ArrivalSchedule(make_offsets("poisson", 50.0, seed=3), 1000.0)
    want = [glob.claim().scheduled_unix for _ in range(300)]
    shards = [ArrivalSchedule(make_offsets("poisson", 50.0, seed=3), 1000.0, i, 3) for i in range(3)]
    got = sorted(s.claim().scheduled_unix for s in shards for _ in range(100))
    assert got == pytest.approx(want)
    assert (want[-1] - want[0]) == pytest.approx(299 / 50.0, rel=0.2)  # Poisson at ~50/s
    const = ArrivalSchedule(constant_offsets(4.0), 0.0, 1, 2)
    assert [const.claim().scheduled_unix for _ in range(3)] == [0.25, 0.75, 1.25]


def test_trace_loading_and_replay_offsets(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '# comment\n{"timestamp": 5000, "input_length": 100, "output_length": 10, "hash_ids": [1, 2]}\n'
        '{"arrival_s": 2.0, "prompt_tokens": 50, "output_tokens": 5}\n\n'
    )
    entries = load_trace(path)
    assert [e.arrival_s for e in entries] == [0.0, 3.0] and entries[1].hash_ids == (1, 2)
    sched = ArrivalSchedule(trace_offsets(entries, time_scale=0.5), 100.0)
    assert [(s.scheduled_unix, s.payload.prompt_tokens) for s in (sched.claim(), sched.claim())] == [
        (100.0, 50),
        (101.5, 100),
    ]
    assert sched.claim() is None and sched.exhausted
    path.write_text('{"arrival_s": 1}\n')
    with pytest.raises(ValueError, match=":1:"):
        load_trace(path)


def test_step_and_spike_profile() -> None:
    users = [step_and_spike_users(t, 4, 2, 20, 10.0, 3.0) for t in (0, 6.9, 7.0, 9.9, 10.0, 17.5)]
    assert users == [4, 4, 20, 20, 6, 20]
