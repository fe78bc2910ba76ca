"""The exporter's KV event subscriber against the bundled engine's own publisher.

- After a forced gap (the subscriber held while the engine runs, with high-water marks of
  one message, so ZeroMQ drops) and its replay, the subscriber's set of cached blocks equals
  the engine's prefix-cache map, hash for hash.
- The miss-ratio curve predicted from one run's events at 1.5x and 2x the pool matches the
  hit ratio measured by replaying the same trace on the simulator with those pools, within
  5 percentage points, on a shared-prefix workload whose prefixes do not fit the pool.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import replace

from exporter.kv_events.source import Limits, SourceState
from exporter.kv_events.spec import KvEventsSource
from exporter.kv_events.subscriber import Subscriber
from reference_engine.config import EngineConfig
from reference_engine.engine_factory import build_engine
from reference_engine.kv_events.events import external_hash
from reference_engine.sampling_params import SamplingParams
from reference_engine.sim.replay import TraceRequest, replay_trace
from reference_engine.sim.spec import SimSpec
from tests.support.prometheus import free_port
from tests.support.wait import wait_until


def _config(**kw) -> str:
    return json.dumps(
        {
            "enable_kv_cache_events": True,
            "endpoint": "tcp://127.0.0.1:*",
            "replay_endpoint": "tcp://127.0.0.1:*",
            "topic": "kv",
            **kw,
        }
    )


def _settled(sub: Subscriber, published: int) -> bool:
    with sub.state.lock:
        return sub.state.stream.expected == published and not sub.state.stream.replaying


def _serve_until_settled(sub: Subscriber, engine, serve, timeout_s: float = 60.0) -> None:
    """A message dropped at the tail of the stream shows only when the next one arrives (gaps
    are found by sequence number, as in vLLM's protocol), and a slow subscriber can lose the
    last of a burst: so the engine keeps serving, as a live one does, until it has caught up."""
    deadline = time.monotonic() + timeout_s
    while True:
        settle_by = time.monotonic() + 2.0
        while time.monotonic() < settle_by:
            if _settled(sub, engine.kv_events_published):
                return
            time.sleep(0.05)
        assert time.monotonic() < deadline, "the subscriber did not catch up with the engine"
        serve()


def test_after_a_forced_gap_and_its_replay_the_subscriber_holds_the_engines_prefix_cache() -> None:
    config = EngineConfig(
        model="tiny-random", num_blocks=24, block_size=4, max_model_len=128, kv_events_config=_config(hwm=1)
    )
    engine = build_engine(config).engine
    publisher = engine.kv_event_publisher
    source = KvEventsSource("engine", publisher.endpoint, publisher.replay_endpoint, topic="kv")
    # The engine, its publisher thread and the subscriber share this process: on a busy 2-core
    # machine the replay's answer can wait past the default 2 s for the interpreter, and a
    # replay given up on loses its batches (the timeout has its own test).
    sub = Subscriber(SourceState(source, Limits(rcvhwm=1, replay_timeout_s=30.0))).start()
    rng = random.Random(3)
    prefixes = [[rng.randrange(1, 200) for _ in range(rng.randrange(8, 20))] for _ in range(4)]

    def wave(n: int) -> None:
        prompts = [rng.choice(prefixes) + [rng.randrange(1, 200) for _ in range(5)] for _ in range(n)]
        engine.generate(prompts, SamplingParams(max_tokens=6, ignore_eos=True))

    try:
        wait_until(lambda: sub.state.connected, "the subscriber connected")

        def joined() -> int:  # the slow joiner: until events arrive (the replay brings the rest)
            wave(1)
            return sub.state.stream.applied

        wait_until(joined, "the engine's events reaching the subscriber")
        _serve_until_settled(sub, engine, lambda: wave(1))
        # The subscriber stops reading and the engine's PUB drops, once the kernel's socket
        # buffers between them are full too: how much that takes varies, so burst until a
        # gap shows.
        for _ in range(10):
            with sub.state.lock:
                for _ in range(6):
                    wave(6)
                time.sleep(0.3)  # a dwell, not a wait: the sockets' buffers fill meanwhile
            wave(1)  # the next batch shows the gap
            _serve_until_settled(sub, engine, lambda: wave(1))
            if sub.state.problems.get("gap"):
                break
        with sub.state.lock:
            tier = sub.state.instances["0"].tiers["GPU"]
            problems = dict(sub.state.problems)
            assert problems.get("gap", 0) >= 1 and "lost" not in problems, problems
            assert set(tier.cached) == {external_hash(h) for h in engine.kv.pool.cached}, problems
            assert sub.state.stream.replayed > 0 and tier.capacity_misses > 0
    finally:
        sub.stop()
        engine.close()


def shared_prefix_trace(
    seed: int = 8, n: int = 400, groups: int = 16, prefix: int = 256
) -> list[TraceRequest]:
    """Poisson arrivals at 4/s; each request a random group's 256-token system prompt (16
    blocks) then 20-200 tokens of its own, and 16-64 output tokens."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(4.0)
        out.append(
            TraceRequest(
                t, prefix + rng.randint(20, 200), rng.randint(16, 64), 1, rng.randrange(groups), prefix
            )
        )
    return out


def test_the_miss_ratio_curve_predicts_the_hit_ratio_of_larger_pools() -> None:
    """16 prefixes x 16 blocks = 256 blocks of system prompts, a 250-block pool (the running
    requests hold some of it), 8 requests at most: the prefixes keep evicting each other,
    and admission is never short of blocks (the regime the model is for: docs/kv-events.md)."""
    spec = SimSpec(model="llama-3.1-8b", gpu="h100-80gb")
    base_cfg = EngineConfig(num_blocks=250, block_size=16, max_num_seqs=8, max_model_len=4096)
    trace = shared_prefix_trace()
    # The run: the trace on the simulator, its events over ZeroMQ to the subscriber, which
    # binds on loopback while the engine's PUB connects (as `kvscope run` sets them up).
    replay = f"tcp://127.0.0.1:{free_port()}"
    state = SourceState(KvEventsSource("sim", "tcp://127.0.0.1:*", replay, topic="kv", bind=True))
    sub = Subscriber(state).start()
    try:
        kv_config = _config(buffer_steps=100_000, endpoint=sub.bound_endpoint, replay_endpoint=replay)
        run = replay_trace(trace, spec, base_cfg, kv_events_config=kv_config)
        wait_until(
            lambda: _settled(sub, run.kv_event_batches),
            "the subscriber settled on the replay's last batch",
            60,
        )
    finally:
        sub.stop()
    assert state.problems == {} and run.num_preemptions == 0
    tier = state.instances["0"].tiers["GPU"]
    tier.pool_blocks = 250
    assert tier.capacity_misses > 1000, "the pool is too small for the prefixes"
    base_ratio = run.prefix_cache_hits / run.prefix_cache_queries
    for increase, factor in ((0.5, 1.5), (1.0, 2.0)):
        predicted = (run.prefix_cache_hits + 16 * tier.curve.avoidable[increase]) / run.prefix_cache_queries
        bigger = replay_trace(trace, spec, replace(base_cfg, num_blocks=int(250 * factor)))
        measured = bigger.prefix_cache_hits / bigger.prefix_cache_queries
        assert measured > base_ratio + 0.05, "more blocks must matter on this workload"
        assert abs(predicted - measured) <= 0.05, (factor, predicted, measured, base_ratio)
