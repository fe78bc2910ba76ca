"""Admission in turns: a burst of requests starts its admission work at most `per_turn` per
event-loop iteration, every request gets its turn in arrival order, I/O is polled between
turns, and a handler cancelled while it waits gives its turn to the next."""

from __future__ import annotations

import asyncio
import socket

import pytest
import uvloop

from reference_engine.server.admission_turns import AdmissionTurns


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_a_burst_takes_turns_with_io_between(run):
    async def main():
        loop = asyncio.get_running_loop()
        turns = AdmissionTurns(per_turn=4)
        iteration, log = [0], []

        def tick():  # counts event-loop iterations
            iteration[0] += 1
            loop.call_soon(tick)

        async def request(i: int):
            await turns.take()
            log.append((iteration[0], i))

        a, b = socket.socketpair()
        io = []
        loop.add_reader(b.fileno(), lambda: io.append(log.copy()) or b.recv(10))
        loop.call_soon(tick)
        tasks = [asyncio.ensure_future(request(i)) for i in range(18)]
        tasks[9].cancel()
        await asyncio.sleep(0)
        a.send(b"x")  # an output arriving in the middle of the burst
        await asyncio.gather(*tasks, return_exceptions=True)
        loop.remove_reader(b.fileno())
        a.close()
        b.close()
        return log, io

    log, io = run(main())
    assert [i for _, i in log] == [i for i in range(18) if i != 9]
    per_iteration = {}
    for it, _ in log:
        per_iteration[it] = per_iteration.get(it, 0) + 1
    assert max(per_iteration.values()) <= 4 and len(per_iteration) >= 5
    assert io and len(io[0]) < 17  # the I/O callback ran before the burst was through
