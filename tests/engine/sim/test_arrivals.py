"""Closed-loop replays: a user's next request arrives its recorded gap after the previous one
finished in the replay, whatever the replayed server's speed; open-loop requests arrive at
their recorded times."""

from __future__ import annotations

from reference_engine.config import EngineConfig
from reference_engine.sim.arrivals import Arrivals
from reference_engine.sim.cost_model import StepTimeModel
from reference_engine.sim.engine import SimSpec
from reference_engine.sim.replay import TraceRequest, replay_trace


class FixedStep(StepTimeModel):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def step_time(self, batch) -> float:
        return self.seconds if batch else 0.0


def _chains(users: int, per_user: int, gap: float) -> list[TraceRequest]:
    """Every request recorded as sent at 0.1 s x its index: a schedule a slow server cannot keep."""
    return [
        TraceRequest(0.1 * (u + users * k), 64, 20, chain=u, after_s=gap)
        for k in range(per_user)
        for u in range(users)
    ]


def _replay(trace: list[TraceRequest], step_s: float):
    config = EngineConfig(max_model_len=1024, max_num_seqs=64, max_num_batched_tokens=2048, num_blocks=400)
    return replay_trace(trace, SimSpec("llama-3.1-8b", "a100-40gb"), config, step_cost=FixedStep(step_s))


def test_a_chain_never_has_two_requests_in_flight_and_waits_its_gap() -> None:
    result = _replay(_chains(users=3, per_user=5, gap=0.25), step_s=0.05)
    assert len(result.records) == 15 and result.max_running <= 3
    by_arrival = sorted(result.records, key=lambda r: r.arrival_s)
    firsts, later = by_arrival[:3], by_arrival[3:]
    assert [r.arrival_s for r in firsts] == [0.0, 0.1, 0.2]  # chain heads at their recorded times
    ends = sorted(r.finished_s for r in result.records)
    for r in later:  # each later arrival is some request's end plus the gap
        assert any(abs(r.arrival_s - (e + 0.25)) < 1e-9 for e in ends)


def test_a_slower_server_stretches_a_closed_loop_and_not_its_queue() -> None:
    trace = _chains(users=4, per_user=6, gap=0.0)
    fast, slow = _replay(trace, 0.01), _replay(trace, 0.1)
    fast_ttft = max(r.ttft_s for r in fast.records)
    slow_ttft = max(r.ttft_s for r in slow.records)
    assert slow.duration_s > 5 * fast.duration_s
    # Queueing stays bounded by the users: a step or two of wait, never the whole backlog.
    assert slow_ttft <= 3 * 0.1 + 1e-9 and fast_ttft <= 3 * 0.01 + 1e-9
    open_loop = [TraceRequest(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in trace]
    piled = _replay(open_loop, 0.1)
    assert piled.max_running > 4 >= slow.max_running  # the schedule outruns the server, users do not


def test_a_refused_request_releases_its_chains_next() -> None:
    trace = [
        TraceRequest(0.0, 5000, 10, chain=0),  # longer than max_model_len: refused
        TraceRequest(9.0, 64, 10, chain=0, after_s=0.5),
    ]
    result = _replay(trace, 0.01)
    assert result.rejected == 1 and len(result.records) == 1
    assert result.records[0].arrival_s == 0.5


def test_release_order_is_by_time_then_index_and_each_request_once() -> None:
    trace = [
        TraceRequest(1.0, 8, 1),
        TraceRequest(0.0, 8, 1, chain=7),
        TraceRequest(0.5, 8, 1, chain=7, after_s=0.2),
        TraceRequest(1.0, 8, 1, chain=3),
    ]
    arrivals = Arrivals(trace)
    assert arrivals.due(1.0) == [(0.0, 1), (1.0, 0), (1.0, 3)]
    assert arrivals and arrivals.next_time() is None  # index 2 waits on index 1
    arrivals.done(1, 2.0)
    assert arrivals.next_time() == 2.2 and arrivals.due(2.2) == [(2.2, 2)]
    arrivals.done(2, 3.0)
    arrivals.done(0, 3.0)  # open-loop: releases nothing
    assert not arrivals
