"""Property-based checks of the block pool, KV manager and scheduler over random workloads."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference_engine.sampling_params import SamplingParams
from tests.engine.fakes import check_invariants, make_engine

request_st = st.tuples(
    st.integers(1, 40),  # prompt length
    st.integers(1, 24),  # max tokens
    st.integers(0, 3),  # which shared prefix (0: none)
    st.integers(1, 3),  # n
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=st.lists(request_st, min_size=1, max_size=12),
    arrivals=st.lists(st.integers(0, 6), min_size=12, max_size=12),
    aborts=st.lists(st.tuples(st.integers(0, 11), st.integers(0, 30)), max_size=4),
    num_blocks=st.integers(18, 48),
    budget=st.integers(4, 64),
    caching=st.booleans(),
    allocator=st.sampled_from(["paged", "contiguous", "contiguous-oracle"]),
)
def test_invariants_hold_every_step(requests, arrivals, aborts, num_blocks, budget, caching, allocator):
    max_model_len = 64
    engine = make_engine(
        num_blocks=num_blocks,
        block_size=4,
        max_model_len=max_model_len,
        max_num_batched_tokens=budget,
        enable_prefix_caching=caching,
        allocator=allocator if num_blocks > 17 else "paged",
        max_num_seqs=6,
    )
    prefixes = {k: [(7 * k + j) % 90 + 1 for j in range(13)] for k in (1, 2, 3)}
    pending = sorted(((arrivals[i], i, r) for i, r in enumerate(requests)), key=lambda t: t[:2])
    abort_at = {step: idx for idx, step in aborts}
    ids: dict[int, str] = {}
    step = 0
    while pending or engine.has_unfinished():
        while pending and pending[0][0] <= step:
            _, i, (plen, max_tokens, prefix, n) = pending.pop(0)
            prompt = (prefixes.get(prefix, []) + [(i * 31 + j) % 90 + 1 for j in range(plen)])[
                : max_model_len - 1
            ]
            try:
                ids[i] = engine.add_request(
                    prompt, SamplingParams(max_tokens=max_tokens, n=n, temperature=1.0, seed=i)
                ).request_id
            except ValueError:
                pass  # a request too large for this pool is refused; the engine carries on
        if step in abort_at and abort_at[step] in ids:
            engine.abort(ids[abort_at[step]])
        engine.step()
        check_invariants(engine)
        step += 1
        assert step < 5000, "engine made no progress"
    pool = engine.kv.pool
    assert pool.num_free_blocks == pool.num_blocks - 1, "every block is free once all requests are done"
    assert not engine.kv.req_blocks
