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


def test_a_conversation_finds_its_history_and_answers_cached_and_shares_its_stem():
    """Two conversations over one 32-token stem: each turn's prompt is its conversation's
    stream up to past the previous answer, so it hits every full block of the previous
    prompt and answer; the second conversation's first turn hits the stem."""

    def turn(at, conversation, prompt, chain):
        return TraceRequest(
            at, prompt, 20, prefix_group=conversation, prefix_tokens=prompt, chain=chain,
            stem_group=9, stem_tokens=32, answer_continues=True,
        )  # fmt: skip

    requests = [turn(0.0, 0, 50, 0), turn(0.0, 0, 90, 0), turn(5.0, 1, 50, 1), turn(5.0, 1, 90, 1)]
    records = sorted(run("paged", requests).records, key=lambda r: r.index)
    # turn 1 carries 50 + 20 = 70 tokens of history: 4 full blocks; the stem is 2 blocks
    assert [r.cached_tokens for r in records] == [0, 64, 32, 64]


def test_without_answer_continuation_only_the_prompt_is_found():
    requests = [TraceRequest(0.0, 50, 20, prefix_group=0, prefix_tokens=50, chain=0)] + [
        TraceRequest(0.0, 90, 20, prefix_group=0, prefix_tokens=90, chain=0)
    ]
    records = sorted(run("paged", requests).records, key=lambda r: r.index)
    assert [r.cached_tokens for r in records] == [0, 48]
