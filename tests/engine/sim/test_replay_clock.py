"""A replay runs on one virtual clock: every stamp a replayed request carries (arrival, first
scheduling, first token, finish) lies on the trace's time axis, where the engine put it, and
advances by the modelled step time per step, however little wall time the replay takes."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest

from reference_engine.config import EngineConfig
from reference_engine.sim.engine import SimSpec
from reference_engine.sim.replay import ReplayResult, TraceRequest, replay_trace

STEP_S = 0.5  # every step, whatever its batch, is modelled to take this long
OUTPUT_TOKENS = 20  # one prefill step (which samples the first token), then 19 decode steps


class ConstantStep:
    def step_time(self, batch: Sequence[tuple[int, int]]) -> float:
        return STEP_S


def replay(trace: list[TraceRequest], **config) -> ReplayResult:
    engine = EngineConfig(max_model_len=1024, num_blocks=600, max_num_batched_tokens=4096, **config)
    return replay_trace(trace, SimSpec("llama-3.1-8b", "a100-40gb"), engine, step_cost=ConstantStep())


def by_arrival(result: ReplayResult) -> list:
    return sorted(result.records, key=lambda r: r.arrival_s)


def test_stamps_of_lone_requests_lie_on_the_virtual_axis() -> None:
    """Requests 100 virtual seconds apart each run alone: scheduled on arrival, first token one
    step later, finished after OUTPUT_TOKENS steps. The virtual run lasts about 15 minutes; the
    replay takes a fraction of a second of wall time, so a wall-clock stamp cannot pass."""
    trace = [TraceRequest(100.0 * i, 64, OUTPUT_TOKENS) for i in range(10)]
    t0 = time.monotonic()
    result = replay(trace)
    wall = time.monotonic() - t0
    assert result.duration_s == pytest.approx(900.0 + OUTPUT_TOKENS * STEP_S)
    assert wall < result.duration_s / 10, "the replay ran at anything like real time"
    assert result.steps == len(trace) * OUTPUT_TOKENS
    records = by_arrival(result)
    assert [r.arrival_s for r in records] == [q.arrival_s for q in trace]
    for r in records:
        assert r.first_scheduled_s == pytest.approx(r.arrival_s), r
        assert r.first_token_s == pytest.approx(r.arrival_s + STEP_S), r
        assert r.finished_s == pytest.approx(r.arrival_s + OUTPUT_TOKENS * STEP_S), r
        assert r.ttft_s == pytest.approx(STEP_S)


def test_a_queued_request_is_scheduled_when_a_seat_frees_on_the_virtual_axis() -> None:
    """One seat, three requests at t=0: each waits for the one before it to finish. With no idle
    gap, the run lasts exactly steps x the modelled step time."""
    trace = [TraceRequest(0.0, 64, OUTPUT_TOKENS) for _ in range(3)]
    result = replay(trace, max_num_seqs=1)
    assert result.steps == 3 * OUTPUT_TOKENS
    assert result.duration_s == pytest.approx(result.steps * STEP_S)
    records = sorted(result.records, key=lambda r: r.first_scheduled_s)
    for i, r in enumerate(records):
        start = i * OUTPUT_TOKENS * STEP_S
        assert r.arrival_s == 0.0
        assert r.first_scheduled_s == pytest.approx(start), r
        assert r.first_token_s == pytest.approx(start + STEP_S), r
        assert r.finished_s == pytest.approx(start + OUTPUT_TOKENS * STEP_S), r


def test_a_trace_ending_in_rejected_requests_replays_to_the_end() -> None:
    """The last requests are too long for the engine: counted as rejected, and the replay ends
    with the last accepted request (it used to look for a next arrival that was not there)."""
    trace = [TraceRequest(0.0, 64, OUTPUT_TOKENS), TraceRequest(50.0, 5000, 5), TraceRequest(60.0, 5000, 5)]
    result = replay(trace)
    assert result.rejected == 2 and len(result.records) == 1
    assert result.records[0].finished_s == pytest.approx(OUTPUT_TOKENS * STEP_S)
