"""The virtual-clock replay: real scheduler and pool, modelled time."""

import random
import time

from reference_engine.config import EngineConfig
from reference_engine.sim.engine import SimSpec
from reference_engine.sim.replay import TraceRequest, replay_trace


def trace(n=120, seed=0):
    rng = random.Random(seed)
    return [TraceRequest(i * 0.02, rng.randint(40, 400), rng.randint(20, 300)) for i in range(n)]


def run(allocator, requests, **kw):
    config = EngineConfig(
        allocator=allocator,
        max_model_len=1024,
        max_num_seqs=256,
        max_num_batched_tokens=4096,
        num_blocks=600,
        **kw,
    )
    return replay_trace(requests, SimSpec("llama-3.1-8b", "a100-40gb"), config)


def test_replay_runs_faster_than_real_time_and_completes_every_request():
    requests = trace()
    t0 = time.perf_counter()
    result = run("paged", requests)
    wall = time.perf_counter() - t0
    assert len(result.records) == len(requests) and result.rejected == 0
    assert all(
        r.output_tokens == q.output_tokens
        for r, q in zip(sorted(result.records, key=lambda r: r.arrival_s), requests)
    )
    assert result.duration_s > wall, "virtual time runs ahead of the wall clock"


def test_paging_wastes_almost_nothing_and_contiguous_reservation_wastes_most():
    requests = trace()
    paged, contiguous = run("paged", requests), run("contiguous", requests)
    assert paged.token_state_share >= 0.96
    assert contiguous.token_state_share <= 0.45
    assert paged.max_running >= 2 * contiguous.max_running
    assert paged.output_tokens_per_s >= 2 * contiguous.output_tokens_per_s


def test_shared_prefix_hits_in_replay():
    requests = [TraceRequest(i * 0.5, 200, 10, prefix_group=0, prefix_tokens=160) for i in range(6)]
    result = run("paged", requests)
    assert result.prefix_cache_hits == 5 * 160
