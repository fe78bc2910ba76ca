"""The seed's worked example, measured: Llama 3 70B with a 40 GB KV cache (two H100s, 20 GB of
KV each: `--kv-cache-memory`), max_model_len 32,768, requests of 2,000 tokens.

The arithmetic says 40e9 / 327,680 bytes per token = 122,070 tokens: 3.7 requests of the
full 32,768 tokens when each reserves it (the seed's "4 contiguous"), 61 of 2,000 tokens
paged (its "~60"). The probe measures what the simulated engine (the real scheduler and
block pool) holds: with `--allocator contiguous` a request takes 2,048 blocks whatever its
length, so 3 fit; paged, a 2,000-token request takes 125 blocks of 16 tokens, so 61 fit;
both pools are 7,628 usable blocks, one less than the 7,629 stated (the null block).
"""

from __future__ import annotations

import json

import pytest

from harness.probe import findings as F
from tests.harness.analysis.runs import engine, kvscope

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DEPLOYMENT = (
    "--simulate", "--sim-model", "llama-3.1-70b", "--sim-gpu", "h100-80gb", "--tensor-parallel-size", "2",
    "--kv-cache-memory", "20000000000", "--max-model-len", "32768",
)  # fmt: skip


def probe(tmp_path, name: str, *flags: str) -> tuple[dict, str]:
    with engine(tmp_path, *DEPLOYMENT, *flags) as url:
        rc, log, _ = kvscope("probe", "--target", url, "--lengths", "2000", "--out", str(tmp_path / name))
    assert rc == 0, log
    return json.loads((tmp_path / name / "probe.json").read_text()), log


def at(doc: dict, tokens: int) -> dict:
    return next(r for r in doc["concurrency"] if r["tokens"] == tokens)


def test_contiguous_holds_3_where_paged_holds_61_at_2000_tokens(tmp_path):
    contiguous, log = probe(tmp_path, "contiguous", "--allocator", "contiguous")
    paged, _ = probe(tmp_path, "paged")
    for doc in (contiguous, paged):
        assert doc["usable_blocks"] == 7628, (doc["findings"], doc["observations"])
        assert doc["stated"]["num_blocks"] == 7629
        assert doc["stated_capacity_tokens"] == 7629 * 16 and doc["capacity_tokens"] == 7628 * 16
        assert F.NULL_BLOCK in [f["code"] for f in doc["findings"]]
    # contiguous: a fixed reservation of max_model_len, whatever the request's length
    assert contiguous["tokens_per_block"] is None and contiguous["fixed_blocks"] == 32768 // 16
    assert F.NO_GROWTH in [f["code"] for f in contiguous["findings"]]
    assert at(contiguous, 2000)["requests"] == at(contiguous, 32768)["requests"] == 3
    assert at(contiguous, 32768)["naive"] == pytest.approx(3.72, abs=0.01)  # the arithmetic's "4"
    # paged: 16 tokens per block, no fixed cost
    assert paged["tokens_per_block"] == 16 and paged["fixed_blocks"] == 0
    assert (at(paged, 2000)["blocks_per_request"], at(paged, 2000)["requests"]) == (125, 61)
    assert at(paged, 32768)["requests"] == 3
    assert "2,000 tokens" in log and "2,048" in log
