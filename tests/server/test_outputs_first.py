"""`CoreClient.deliver_waiting`: the core's outputs that have arrived are handed on when the
server asks, before the event loop comes to them, in order and once each, with the engine core
in its own process (a simulated one: real steps, real ZeroMQ) and on a thread. The server asks
before each request's admission work (`AsyncEngine.route_waiting`), so that a burst of arrivals
does not hold back the streams already running; the steps it routes in a row are observed in
one pass after them."""

from __future__ import annotations

import asyncio
import time

import zmq

from reference_engine.config import EngineConfig
from reference_engine.core.client import ThreadCoreClient
from reference_engine.core.launch import CoreLaunch, build_core
from reference_engine.core.messages import AddRequest, CoreOutputs
from reference_engine.core.process_client import ProcessCoreClient
from reference_engine.sampling_params import SamplingParams
from reference_engine.server.async_engine import AsyncEngine
from reference_engine.sim.engine import load_sim_tokenizer
from reference_engine.sim.spec import SimSpec

LAUNCH = CoreLaunch(EngineConfig(max_model_len=4096), SimSpec("llama-3.1-70b", "h100-80gb", 4))
TOKENS = 6  # ~20 ms simulated steps: the request ends well within the blocked second below


def _tokens(delivered: list[CoreOutputs]) -> list[int]:
    return [t for outputs in delivered for out in outputs.outputs for t in out.new_token_ids]


async def _outputs_wait_for_the_server(client) -> None:
    delivered: list[CoreOutputs] = []
    await client.start(delivered.append, lambda status: None)
    try:
        params = SamplingParams(max_tokens=TOKENS, ignore_eos=True)
        client.send(AddRequest("r", [1, 2, 3], params, time.monotonic()))
        time.sleep(1.0)  # the loop is blocked: the core's outputs arrive, nothing can route them
        assert delivered == []
        client.deliver_waiting()
        assert len(_tokens(delivered)) == TOKENS  # every step's outputs, at once
        stamps = [outputs.timestamp for outputs in delivered]
        assert stamps == sorted(stamps)
        handed = len(delivered)
        await asyncio.sleep(0.3)  # now the loop's own reader runs: nothing is left, nothing twice
        assert len(delivered) == handed and len(_tokens(delivered)) == TOKENS
    finally:
        await client.stop(30.0)


def test_the_process_client_hands_on_what_arrived_when_asked():
    asyncio.run(_outputs_wait_for_the_server(ProcessCoreClient(LAUNCH)))


def test_a_frame_that_cannot_be_decoded_is_logged_and_later_ones_still_arrive(caplog):
    async def run() -> list[CoreOutputs]:
        client = ProcessCoreClient(LAUNCH)
        delivered: list[CoreOutputs] = []
        await client.start(delivered.append, lambda status: None)
        intruder = zmq.Context.instance().socket(zmq.PUSH)
        try:
            intruder.connect(f"ipc://{client._dir}/output")
            intruder.send(b"not msgpack")
            await asyncio.sleep(0.2)
            params = SamplingParams(max_tokens=TOKENS, ignore_eos=True)
            client.send(AddRequest("r", [1, 2, 3], params, time.monotonic()))
            for _ in range(100):
                await asyncio.sleep(0.05)
                if len(_tokens(delivered)) == TOKENS:
                    break
        finally:
            intruder.close(linger=0)
            await client.stop(30.0)
        return delivered

    assert len(_tokens(asyncio.run(run()))) == TOKENS
    assert "handling the engine core's outputs failed" in caplog.text


def test_the_thread_client_hands_on_what_arrived_when_asked():
    built = build_core(LAUNCH)
    client = ThreadCoreClient(built.engine, built.ready, built.on_step_start)
    asyncio.run(_outputs_wait_for_the_server(client))


def test_steps_routed_together_are_observed_after_one_pass():
    async def run() -> int:
        engine = AsyncEngine(ProcessCoreClient(LAUNCH), load_sim_tokenizer())
        passes: list[int] = []
        await engine.start("m")
        engine.after_pass = lambda: passes.append(1)
        try:
            params = SamplingParams(max_tokens=TOKENS, ignore_eos=True)
            engine.client.send(AddRequest("r", [1, 2, 3], params, time.monotonic()))
            time.sleep(1.0)  # every step's outputs arrive while the loop is blocked
            engine.route_waiting()
            await asyncio.sleep(0.3)
        finally:
            await engine.stop(30.0)
        return len(passes)

    assert asyncio.run(run()) == 1  # the six steps' outputs, one observation pass
