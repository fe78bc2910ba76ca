"""A deterministic forward-pass stand-in for scheduler and block-pool tests.

The next token is a hash of the whole context, so any scheduling that feeds a sequence the
wrong context (lost tokens, a wrong chunk boundary, a bad fork) changes the output. It
checks bookkeeping, not KV contents; the real-model tests check those.
"""

from __future__ import annotations

import zlib

from reference_engine.engine import LLMEngine, StepResult
from reference_engine.scheduler_output import SchedulerOutput

VOCAB = 97
EOS = 0


class ContextHashExecutor:
    def __init__(self):
        self.steps: list[SchedulerOutput] = []

    def execute(self, out: SchedulerOutput) -> StepResult:
        self.steps.append(out)
        sampled = {}
        for chunk in out.chunks:
            if not chunk.samples:
                continue
            req = chunk.request
            ctx = req.token_ids[: chunk.end]
            n = req.sampling_params.n if req.num_output_tokens == 0 and req.index == 0 else 1
            sampled[req.request_id] = [
                self.next_token(ctx, req.request_id if n > 1 else "", i) for i in range(n)
            ]
        return StepResult(sampled)

    @staticmethod
    def next_token(ctx: list[int], salt: str, i: int) -> int:
        h = zlib.crc32(repr((ctx, salt, i)).encode())
        return 1 + h % (VOCAB - 1)  # never EOS, so lengths are controlled by max_tokens


class CharTokenizer:
    def encode(self, text: str) -> list[int]:
        return [1 + (ord(c) % (VOCAB - 1)) for c in text]

    def decode(self, token_ids: list[int]) -> str:
        return "".join(chr(ord("a") + t % 26) for t in token_ids)


def make_engine(
    num_blocks=64,
    block_size=4,
    max_model_len=256,
    max_num_seqs=16,
    max_num_batched_tokens=64,
    enable_prefix_caching=True,
    allocator="paged",
    watermark=0.0,
    detokenize=True,
) -> LLMEngine:
    return LLMEngine(
        executor=ContextHashExecutor(),
        tokenizer=CharTokenizer(),
        num_blocks=num_blocks,
        block_size=block_size,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        enable_prefix_caching=enable_prefix_caching,
        allocator=allocator,
        watermark=watermark,
        eos_token_ids=(EOS,),
        vocab_size=VOCAB,
        detokenize=detokenize,
    )


def check_invariants(engine: LLMEngine) -> None:
    kv = engine.kv
    pool = kv.pool
    occurrences: dict[int, int] = {}
    for blocks in kv.req_blocks.values():
        for b in blocks:
            occurrences[b.block_id] = occurrences.get(b.block_id, 0) + 1
    for block in pool.blocks[1:]:
        assert block.ref_cnt == occurrences.get(block.block_id, 0), f"block {block.block_id} ref count"
    free_ids = {b.block_id for b in pool.free_queue}
    assert len(free_ids) == pool.free_queue.num_free
    assert free_ids == {b.block_id for b in pool.blocks[1:] if b.ref_cnt == 0}
    assert 0 not in free_ids and 0 not in occurrences
    for h, block in pool.cached.items():
        assert block.block_hash == h
    assert 0.0 <= pool.usage() <= 1.0
    live = {r.request_id for r in engine.scheduler.running}
    assert set(kv.req_blocks) == live, "only running requests hold blocks"
    for r in engine.scheduler.running:
        assert len(kv.req_blocks[r.request_id]) * kv.block_size >= r.num_computed_tokens
