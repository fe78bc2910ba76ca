"""The server's garbage collection runs between passes: automatic collection is off while it
serves, cycles are still collected once allocations pass the first threshold (after a pass,
or on the timer), and stopping hands collection back to CPython."""

from __future__ import annotations

import asyncio
import gc
import weakref

from reference_engine.server.gc_schedule import BetweenSteps


class Node:
    def __init__(self):
        self.other = self


def cycle_garbage() -> weakref.ref:
    return weakref.ref(Node())  # unreachable at once, but only a collection frees a cycle


def test_cycles_are_collected_between_passes_and_only_when_due():
    async def main():
        collector = BetweenSteps(asyncio.get_running_loop())
        thresholds = gc.get_threshold()
        collector.start()
        try:
            assert not gc.isenabled()
            gc.collect()
            gc.set_threshold(100, 10, 10)
            gone = cycle_garbage()
            collector.collect_due()  # few allocations since the last collection: nothing yet
            assert gone() is not None
            keep = [[] for _ in range(200)]  # past the first threshold
            collector.collect_due()
            assert gone() is None and keep
        finally:
            gc.set_threshold(*thresholds)
            collector.stop()
        assert gc.isenabled()

    asyncio.run(main())


def test_the_timer_collects_when_no_pass_does(monkeypatch):
    monkeypatch.setattr("reference_engine.server.gc_schedule.PERIOD_S", 0.05)

    async def main():
        collector = BetweenSteps(asyncio.get_running_loop())
        thresholds = gc.get_threshold()
        collector.start()
        try:
            gc.set_threshold(100, 10, 10)
            gone = cycle_garbage()
            keep = [[] for _ in range(200)]
            await asyncio.sleep(0.2)
            assert gone() is None and keep
        finally:
            gc.set_threshold(*thresholds)
            collector.stop()

    asyncio.run(main())
