"""Before a ladder request is sent, the probe waits for the previous one to be gone: a server
can count it as running, its blocks held, a moment after its stream ended, and an idle level
read then would be subtracted from the next request's peak. The readers here answer from a
list: the moment a real server lags cannot be produced on demand."""

from __future__ import annotations

import asyncio

from harness.probe import lone_request
from harness.probe.lone_request import idle_reading
from harness.probe.observation import PoolReading


class ListReader:
    def __init__(self, readings: list[PoolReading]) -> None:
        self.readings, self.reads = readings, 0

    async def read(self) -> PoolReading:
        self.reads += 1
        return self.readings[min(self.reads, len(self.readings)) - 1]


def test_the_idle_level_is_read_once_nothing_runs():
    lagging = PoolReading(usage=0.25, running=1)
    reader = ListReader([lagging, lagging, PoolReading(usage=0.0, running=0)])
    assert asyncio.run(idle_reading(reader)) == PoolReading(usage=0.0, running=0) and reader.reads == 3


def test_a_server_that_never_says_it_is_idle_is_waited_for_a_bounded_time(monkeypatch):
    monkeypatch.setattr(lone_request, "IDLE_WAIT_S", 0.2)
    reader = ListReader([PoolReading(usage=0.25, running=2)])
    assert asyncio.run(idle_reading(reader)).running == 2 and 2 <= reader.reads <= 6


def test_a_server_that_does_not_count_running_requests_is_read_once():
    reader = ListReader([PoolReading(usage=0.1)])
    assert asyncio.run(idle_reading(reader)).usage == 0.1 and reader.reads == 1
