"""ModelRunner bookkeeping on tiny-random: slots, block tables, mixed batches, copy-on-write
ordering and prompt logits. The oracle here is a one-shot prefill in a fresh cache (the
dense-vs-paged check lives in test_model_llama.py); tolerance fp32 max |diff| < 1e-4."""

from __future__ import annotations

import pytest
import torch

from reference_engine.attention.kv_cache import allocate_kv_caches
from reference_engine.model import load_model
from reference_engine.model.registry import LoadedModel
from reference_engine.model_runner import ModelRunner, build_step_inputs
from reference_engine.request import Request
from reference_engine.sampling_params import SamplingParams
from reference_engine.scheduler_output import ScheduledChunk, SchedulerOutput

BLOCK = 16
TOL = 1e-4


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return load_model("tiny-random")


def runner_for(loaded: LoadedModel, num_blocks: int = 24) -> ModelRunner:
    c = loaded.config
    caches = allocate_kv_caches(c.num_layers, num_blocks, BLOCK, c.num_kv_heads, c.head_dim, torch.float32)
    return ModelRunner(loaded, caches, BLOCK, None)


def request(
    ids: list[int], rid: str, num_prompt: int | None = None, prompt_logprobs: int | None = None
) -> Request:
    params = SamplingParams(temperature=0.0, prompt_logprobs=prompt_logprobs)
    return Request(rid, list(ids), num_prompt if num_prompt is not None else len(ids), params, 0.0)


def tokens(n: int, seed: int) -> list[int]:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def one_shot(loaded: LoadedModel, ids: list[int]) -> torch.Tensor:
    """Logits after every token of `ids`, from a single prefill in a fresh cache."""
    req = request(ids, "oracle", prompt_logprobs=0)
    blocks = list(range(1, (len(ids) + BLOCK - 1) // BLOCK + 1))
    out = runner_for(loaded).execute(
        SchedulerOutput([ScheduledChunk(req, 0, len(ids), blocks, samples=True)])
    )
    return out.prompt_logits["oracle"]


def test_step_inputs_layout():
    a = request(tokens(20, 0), "a")
    b = request(tokens(33, 1), "b")
    chunks = [
        ScheduledChunk(a, 14, 6, [5, 2], samples=True),
        ScheduledChunk(b, 32, 1, [7, 1, 9], samples=True),
    ]
    step = build_step_inputs(chunks, BLOCK, "cpu")
    assert step.positions.tolist() == [14, 15, 16, 17, 18, 19, 32]
    assert step.input_ids.tolist() == a.token_ids[14:20] + b.token_ids[32:33]
    # position p -> block_ids[p // 16] * 16 + p % 16
    assert step.meta.slot_mapping.tolist() == [5 * 16 + 14, 5 * 16 + 15, 32, 33, 34, 35, 9 * 16 + 0]
    assert step.meta.block_tables.tolist() == [[5, 2, 0], [7, 1, 9]]
    assert step.meta.block_tables.dtype == torch.int32
    assert step.meta.seq_lens.tolist() == [20, 33] and step.meta.query_start_loc.tolist() == [0, 6, 7]
    assert (step.meta.max_query_len, step.meta.max_seq_len) == (6, 33)
    assert step.sample_rows == [5, 6]


def test_short_block_table_is_refused():
    a = request(tokens(20, 0), "a")
    with pytest.raises(ValueError, match="cannot hold 20 tokens"):
        build_step_inputs([ScheduledChunk(a, 0, 20, [3], samples=True)], BLOCK, "cpu")


def test_mixed_prefill_and_decode_batch_matches_one_shot(tiny: LoadedModel):
    runner = runner_for(tiny)
    a, b = request(tokens(40, 2), "a"), request(tokens(18, 3), "b")
    blocks_a, blocks_b = [4, 11, 6], [9, 2]
    # Step 1: a's first chunk alone. Step 2: a's rest and b's whole prompt together.
    out1 = runner.execute(SchedulerOutput([ScheduledChunk(a, 0, 25, blocks_a, samples=False)]))
    assert out1.sample_logits.shape == (0, tiny.config.vocab_size)
    out2 = runner.execute(
        SchedulerOutput(
            [
                ScheduledChunk(a, 25, 15, blocks_a, samples=True),
                ScheduledChunk(b, 0, 18, blocks_b, samples=True),
            ]
        )
    )
    assert out2.sample_logits.shape == (2, tiny.config.vocab_size)
    # Step 3: one decode token each, in the opposite chunk order.
    a.token_ids.append(7)
    b.token_ids.append(44)
    out3 = runner.execute(
        SchedulerOutput(
            [
                ScheduledChunk(b, 18, 1, blocks_b, samples=True),
                ScheduledChunk(a, 40, 1, blocks_a, samples=True),
            ]
        )
    )
    ref_a, ref_b = one_shot(tiny, a.token_ids), one_shot(tiny, b.token_ids)
    assert (out2.sample_logits[0] - ref_a[39]).abs().max() < TOL
    assert (out2.sample_logits[1] - ref_b[17]).abs().max() < TOL
    assert (out3.sample_logits[0] - ref_b[18]).abs().max() < TOL
    assert (out3.sample_logits[1] - ref_a[40]).abs().max() < TOL


def fork_step(runner: ModelRunner, with_copy: bool) -> tuple[torch.Tensor, list[int], list[int]]:
    """Parent prefills 20 tokens in blocks [3, 8]; the child shares full block 3 and gets a
    copy of the partial block 8 in block 12, then both decode one (different) token."""
    prompt = tokens(20, 4)
    parent = request(prompt, "p")
    runner.execute(SchedulerOutput([ScheduledChunk(parent, 0, 20, [3, 8], samples=True)]))
    child = request(prompt, "c", num_prompt=20)
    child.num_computed_tokens = 20
    parent.token_ids.append(65)
    child.token_ids.append(66)
    out = runner.execute(
        SchedulerOutput(
            chunks=[
                ScheduledChunk(parent, 20, 1, [3, 8], samples=True),
                ScheduledChunk(child, 20, 1, [3, 12], samples=True),
            ],
            block_copies=[(8, 12)] if with_copy else [],
        )
    )
    return out.sample_logits, parent.token_ids, child.token_ids


def test_copy_on_write_is_applied_before_the_forward_pass(tiny: LoadedModel):
    logits, parent_ids, child_ids = fork_step(runner_for(tiny), with_copy=True)
    assert (logits[0] - one_shot(tiny, parent_ids)[-1]).abs().max() < TOL
    assert (logits[1] - one_shot(tiny, child_ids)[-1]).abs().max() < TOL
    # Negative control: without the copy the child's block 12 lacks positions 16..19.
    bad, _, _ = fork_step(runner_for(tiny), with_copy=False)
    assert (bad[1] - one_shot(tiny, child_ids)[-1]).abs().max() > 1e-2


def test_copies_run_even_in_a_step_without_chunks(tiny: LoadedModel):
    runner = runner_for(tiny)
    runner.kv_caches[0].key[5].fill_(1.5)
    out = runner.execute(SchedulerOutput(block_copies=[(5, 6)]))
    assert out.sample_logits.shape[0] == 0 and out.prompt_logits == {}
    assert bool((runner.kv_caches[0].key[6] == 1.5).all())


def test_prompt_logits_only_for_prompt_chunks_that_ask(tiny: LoadedModel):
    runner = runner_for(tiny)
    want, plain = request(tokens(30, 5), "want", prompt_logprobs=2), request(tokens(12, 6), "plain")
    out1 = runner.execute(
        SchedulerOutput(
            [
                ScheduledChunk(want, 0, 17, [1, 2], samples=False),
                ScheduledChunk(plain, 0, 12, [3], samples=True),
            ]
        )
    )
    out2 = runner.execute(SchedulerOutput([ScheduledChunk(want, 17, 13, [1, 2], samples=True)]))
    assert set(out1.prompt_logits) == {"want"} and out1.prompt_logits["want"].shape == (17, 260)
    assert out2.prompt_logits["want"].shape == (13, 260)
    ref = one_shot(tiny, want.token_ids)
    got = torch.cat([out1.prompt_logits["want"], out2.prompt_logits["want"]])
    assert (got - ref).abs().max() < TOL
    assert (out2.sample_logits[0] - ref[-1]).abs().max() < TOL
    want.token_ids.append(1)  # a decode chunk starts past the prompt: no prompt logits
    out3 = runner.execute(SchedulerOutput([ScheduledChunk(want, 30, 1, [1, 2], samples=True)]))
    assert out3.prompt_logits == {}
