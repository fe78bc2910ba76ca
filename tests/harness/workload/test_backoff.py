"""The users' shared backoff: connection failures in a row close the gate exponentially longer,
capped; any HTTP answer opens it; timeouts and aborts leave it alone."""

from __future__ import annotations

import random

from harness.workload.backoff import BASE_S, CAP_S, JITTER, Backoff


def test_connection_failures_back_off_exponentially_up_to_the_cap() -> None:
    b = Backoff(rng=random.Random(1))
    waits = []
    for _ in range(8):
        b.record("connect_error", False, 100.0)
        waits.append(b.delay_s())
    assert waits == [min(CAP_S, BASE_S * 2**i) for i in range(8)] and waits[-1] == CAP_S
    assert 100.0 + CAP_S * (1 - JITTER) <= b.until_unix <= 100.0 + CAP_S * (1 + JITTER)


def test_a_stream_cut_short_counts_and_any_answer_resets() -> None:
    b = Backoff()
    b.record("stream_error", True, 10.0)  # headers came, then the connection broke off
    b.record("connect_error", False, 10.0)
    assert b.failures == 2 and b.until_unix > 10.0
    b.record("http_5xx", True, 11.0)  # the server is there, even if it refuses
    assert (b.failures, b.until_unix, b.delay_s()) == (0, 0.0, 0.0)


def test_timeouts_and_aborts_leave_the_gate_as_it_is() -> None:
    b = Backoff()
    b.record("connect_error", False, 10.0)
    gate = b.until_unix
    for error in ("timeout", "aborted"):
        b.record(error, False, 20.0)
    assert (b.failures, b.until_unix) == (1, gate)
    b.record(None, True, 20.0)
    assert b.failures == 0
