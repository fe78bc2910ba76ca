"""`--kv-cache-memory` on the simulator: a stated KV budget per GPU (vLLM's
--kv-cache-memory-bytes) sizes the pool as the sizing arithmetic does, whatever the GPU."""

from __future__ import annotations

import pytest

from harness.advisor import sizing
from reference_engine.catalogue import get_model
from reference_engine.config import EngineConfig
from reference_engine.sim.engine import budget_num_blocks

LLAMA_70B = get_model("llama-3.1-70b")


@pytest.mark.parametrize(
    ("kv_dtype", "tp", "blocks"), [("auto", 2, 7629), ("fp8", 2, 15258), ("auto", 1, 3814)]
)
def test_a_40gb_budget_for_llama_70b(kv_dtype, tp, blocks):
    config = EngineConfig(kv_cache_memory=20_000_000_000, kv_cache_dtype=kv_dtype)
    got = budget_num_blocks(LLAMA_70B, config, "fp8" if kv_dtype == "fp8" else "bf16", tp)
    per_block = sizing.block_bytes(LLAMA_70B, kv_dtype, tp, 16)
    assert got == blocks == sizing.num_blocks(20_000_000_000, per_block)


def test_without_a_budget_the_gpu_arithmetic_sizes_the_pool():
    assert budget_num_blocks(LLAMA_70B, EngineConfig(), "bf16", 2) is None
