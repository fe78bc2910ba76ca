"""`kvscope probe` on a real vLLM (0.32's CPU build, SmolLM2-135M, one server for the module):
it measures 128 tokens per block and the pool `cache_config_info` states, less the null
block it names (vLLM's usage is blocks held over num_gpu_blocks - 1); its table sets vLLM's
own start-up figure ("Maximum concurrency for 1,024 tokens per request", the
`kv_cache_max_concurrency` label) beside what the pool really holds; and the concurrency it
predicts at a fixed length holds, while 1.5 times it preempts."""

from __future__ import annotations

import json
import math

import pytest

from harness.probe import findings as F
from tests.harness.analysis.runs import kvscope
from tests.support.vllm_server import vllm_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

BLOCKS = 17  # 16 usable blocks of 128 tokens (2,048 tokens); max_model_len 1,024 needs 8
# 100 + 92 = 192 tokens: KV for 191 at the last step, 2 blocks of 128, whatever the calibrated
# prompt's few tokens of error; a request is admitted with one block and grows to two.
PROMPT, OUTPUT = 100, 92
LENGTH = PROMPT + OUTPUT


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm")
    with vllm_server(tmp, "--num-gpu-blocks-override", str(BLOCKS)) as server:
        yield server, tmp


@pytest.fixture(scope="module")
def probed(vllm):
    server, tmp = vllm
    rc, log, seconds = kvscope(
        "probe", "--target", server.url, "--lengths", str(LENGTH), "--out", str(tmp / "probe"), timeout_s=1200
    )
    assert rc == 0, log
    print(f"probe took {seconds:.0f} s")
    return json.loads((tmp / "probe" / "probe.json").read_text())


def test_the_probe_measures_128_token_blocks_and_the_stated_pool_less_the_null_block(probed):
    assert probed["tokens_per_block"] == 128 and probed["fixed_blocks"] == 0 and probed["whole_blocks"]
    assert probed["usable_blocks"] == BLOCKS - 1
    # from usage's one-block steps; else the findings and observations say which reads fell short
    assert probed["usable_blocks_source"].startswith("measured"), (probed["findings"], probed["observations"])
    assert probed["stated"]["num_blocks"] == BLOCKS and probed["stated"]["block_size"] == 128
    assert probed["capacity_tokens"] == (BLOCKS - 1) * 128
    assert probed["stated_capacity_tokens"] == BLOCKS * 128  # vLLM's kv_cache_size_tokens
    assert F.NULL_BLOCK in [f["code"] for f in probed["findings"]]


def test_the_table_sets_vllms_startup_figure_beside_the_measured_one(probed):
    top = next(r for r in probed["concurrency"] if r["label"] == "max_model_len")
    assert top["tokens"] == 1024 and top["server_figure"] == pytest.approx(BLOCKS / 8)  # 17 / 8 = 2.12x
    assert top["requests"] == (BLOCKS - 1) // 8 == 2
    row = next(r for r in probed["concurrency"] if r["tokens"] == LENGTH)
    assert (row["blocks_per_request"], row["requests"]) == (2, 8)


def test_the_predicted_concurrency_holds_on_vllm(vllm, probed):
    server, tmp = vllm
    predicted = next(r for r in probed["concurrency"] if r["tokens"] == LENGTH)["requests"]
    preemptions = {}
    for users in (predicted, math.ceil(1.5 * predicted)):
        out = tmp / f"run-{users}"
        rc, log, _ = kvscope(
            "run", "--quiet", "--target", server.url, "--workload", "long_context",
            "--endpoint", "completions", "--prompt-tokens", str(PROMPT), "--output-tokens", str(OUTPUT),
            "--length-spread", "0", "--users", str(users), "--spawn-rate", "100", "--duration", "20s",
            "--out", str(out),
            timeout_s=900,
        )  # fmt: skip
        assert rc == 0, log
        preemptions[users] = json.loads((out / "summary.json").read_text())["server"]["preemptions"]
    print(f"preemptions by users: {preemptions}")
    assert preemptions[predicted] == 0 and preemptions[math.ceil(1.5 * predicted)] > 0
