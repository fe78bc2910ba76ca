"""Engine bookkeeping: scheduling choices never change what a sequence sees, prefix hits
are counted exactly, and bad input is refused without disturbing other requests."""

import pytest

from reference_engine.sampling_params import InvalidRequestError, SamplingParams
from tests.engine.fakes import check_invariants, make_engine

PROMPTS = [[(i * 13 + j * 7) % 90 + 1 for j in range(5 + 9 * i)] for i in range(8)]


def run_all(engine, prompts=PROMPTS, params=None):
    params = params or SamplingParams(max_tokens=20, temperature=0.0)
    results = engine.generate(prompts, params)
    check_invariants(engine)
    assert engine.kv.pool.num_free_blocks == engine.kv.pool.num_blocks - 1
    return [[c.output_token_ids for c in r.choices] for r in results]


def test_prefix_caching_on_and_off_give_identical_output():
    shared = [5] * 24
    prompts = [shared + p for p in PROMPTS]
    on = make_engine(enable_prefix_caching=True)
    assert run_all(on, prompts) == run_all(make_engine(enable_prefix_caching=False), prompts)
    assert on.stats.prefix_cache_hits > 0


def test_preemption_gives_identical_output():
    ample = make_engine(num_blocks=256)
    tiny = make_engine(num_blocks=24)
    assert run_all(tiny) == run_all(ample)
    assert tiny.stats.num_preemptions > 0 and ample.stats.num_preemptions == 0


def test_paged_and_contiguous_give_identical_output():
    paged = make_engine(num_blocks=128, max_model_len=100)
    contiguous = make_engine(num_blocks=128, max_model_len=100, allocator="contiguous")
    oracle = make_engine(num_blocks=128, max_model_len=100, allocator="contiguous-oracle")
    assert run_all(paged) == run_all(contiguous) == run_all(oracle)
    assert contiguous.stats.peak_kv_usage > oracle.stats.peak_kv_usage > paged.stats.peak_kv_usage


def test_chunked_prefill_gives_identical_output():
    small = make_engine(max_num_batched_tokens=3)
    assert run_all(small) == run_all(make_engine(max_num_batched_tokens=512))
    assert small.stats.steps > 0


def test_parallel_sampling_shares_prompt_blocks_and_copies_the_partial_one():
    engine = make_engine(num_blocks=64, block_size=4)
    prompt = list(range(1, 11))  # 2 full blocks + a partial one
    engine.add_request(prompt, SamplingParams(max_tokens=6, n=3, temperature=1.0, seed=1), request_id="r")
    engine.step()  # prefill + fork
    seqs = engine.groups["r"].sequences
    tables = [engine.kv.block_ids(s.request_id) for s in seqs]
    assert tables[0] == tables[1] == tables[2]
    engine.step()  # first decode writes into the shared partial block: copy-on-write
    tables = [engine.kv.block_ids(s.request_id) for s in seqs]
    assert tables[0][:2] == tables[1][:2] == tables[2][:2], "full prompt blocks stay shared"
    assert len({t[2] for t in tables}) == 3, "each sequence has its own copy of the partial block"
    assert len(engine.executor.steps[-1].block_copies) == 2
    check_invariants(engine)
    while engine.has_unfinished():
        engine.step()
    assert engine.kv.pool.num_free_blocks == engine.kv.pool.num_blocks - 1


def test_shared_system_prompt_hits_equal_tokens_of_shared_full_blocks():
    block_size = 4
    system = [3] * 30  # 7 full blocks (28 tokens) + 2 tokens in a partial block
    users = [[10 + i] * 6 for i in range(5)]
    engine = make_engine(block_size=block_size, num_blocks=256)
    engine.generate([system + users[0]], SamplingParams(max_tokens=4, temperature=0.0))
    before = engine.stats.prefix_cache_hits
    engine.generate([system + u for u in users[1:]], SamplingParams(max_tokens=4, temperature=0.0))
    engine.step()
    assert engine.kv.prefix_stats.hits - before == 4 * (30 // block_size) * block_size


@pytest.mark.parametrize(
    "prompt, params, match",
    [
        ([1] * 300, SamplingParams(max_tokens=4), "max_model_len"),
        ([1] * 10, SamplingParams(max_tokens=0), "max_tokens"),
        ([1] * 10, SamplingParams(max_tokens=-3), "max_tokens"),
        ([], SamplingParams(max_tokens=4), "empty"),
        ([1, 2, 10_000], SamplingParams(max_tokens=4), "token ids"),
        ([1] * 10, SamplingParams(max_tokens=200), "pool too small"),
    ],
)
def test_bad_input_is_refused_and_the_engine_keeps_serving(prompt, params, match):
    engine = make_engine(num_blocks=20, block_size=4)
    good = engine.add_request([1, 2, 3], SamplingParams(max_tokens=5, temperature=0.0))
    engine.step()
    with pytest.raises(InvalidRequestError, match=match):
        engine.add_request(prompt, params)
    while engine.has_unfinished():
        engine.step()
    assert good.num_output_tokens == 5 and good.status.value == "length"
    assert engine.kv.pool.num_free_blocks == engine.kv.pool.num_blocks - 1


def test_contiguous_pool_too_small_for_one_request_is_a_clear_error():
    with pytest.raises(InvalidRequestError, match="too small for even one request"):
        make_engine(num_blocks=10, block_size=4, max_model_len=256, allocator="contiguous")


def test_abort_frees_blocks_at_once():
    engine = make_engine()
    req = engine.add_request(list(range(1, 30)), SamplingParams(max_tokens=50, n=2))
    engine.step()
    engine.step()
    assert engine.kv.pool.usage() > 0
    assert engine.abort(req.request_id)
    assert engine.kv.pool.usage() == 0.0 and not engine.has_unfinished()
    assert not engine.abort("nope")


def test_stop_strings_truncate_and_finish():
    engine = make_engine()
    (res,) = engine.generate([[1, 2, 3]], SamplingParams(max_tokens=30, temperature=0.0))
    text = res.texts[0]
    stop = text[5:7]
    engine2 = make_engine()
    (res2,) = engine2.generate([[1, 2, 3]], SamplingParams(max_tokens=30, temperature=0.0, stop=[stop]))
    assert res2.texts[0] == text[: text.find(stop)]
    assert res2.choices[0].status.value == "stop"
