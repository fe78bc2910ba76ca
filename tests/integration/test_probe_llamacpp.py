"""`kvscope probe` on a real llama.cpp `llama-server` (4 slots, `-c 8192`): the occupancy comes
from `/slots` (each busy slot's tokens), a token is the unit (1 token per block, no fixed
cost), the pool is the slots' 4 x 2,048 tokens, and a request runs in one slot: the table
holds 4 requests of 1,000 tokens and none of 3,000, where the pool's tokens over the length
would say 8 and 2."""

from __future__ import annotations

import json

import pytest

from harness.probe import findings as F
from tests.harness.analysis.runs import kvscope
from tests.support.llama_server import llama_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_the_probe_reads_each_slot_from_slots(tmp_path):
    with llama_server(tmp_path) as server:
        rc, log, seconds = kvscope(
            "probe", "--target", server.url, "--lengths", "1000,3000", "--out", str(tmp_path / "probe"),
            timeout_s=800,
        )  # fmt: skip
    assert rc == 0, log
    doc = json.loads((tmp_path / "probe" / "probe.json").read_text())
    assert doc["stated"]["dialect"] == "llamacpp"
    assert doc["stated"]["slots"] == [2048] * 4 and doc["stated"]["slot_layout"] == "per-slot"
    assert doc["tokens_per_block"] == 1 and doc["fixed_blocks"] == 0 and doc["whole_blocks"]
    assert doc["capacity_tokens"] == doc["stated_capacity_tokens"] == 8192
    assert F.CAPACITY_MATCHES in [f["code"] for f in doc["findings"]]
    rows = {r["tokens"]: r for r in doc["concurrency"]}
    assert (rows[1000]["requests"], rows[3000]["requests"]) == (4, 0)
    assert rows[1000]["naive"] == pytest.approx(8.192) and rows[2048]["label"] == "max_model_len"
    assert "slots: 4 x 2,048 tokens (per-slot pool)" in log
    print(f"probe took {seconds:.0f} s")
