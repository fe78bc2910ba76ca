"""A live vLLM 0.32 (CPU build) read by `kvscope exporter inspect`, the acceptance of vLLM as a
first-class target for the exporter. One server for the module (start-up takes minutes):
SmolLM2-135M, a 10-block pool of 128 tokens, `--max-model-len 1024` (tests/support/vllm_server).

- The server answers: "The capital of France is" -> " Paris" at temperature 0, through the
  official `openai` client.
- Every canonical quantity `inspect URL/metrics --json` prints is vLLM's own series, read by
  prometheus_client's parser from the same server: idle before a burst, idle after it, and
  (through `inspect -`) an exposition taken while the burst runs; the capacity is
  cache_config_info's num_gpu_blocks x block_size, which vLLM also states as
  kv_cache_size_tokens.
- Across the burst (BURST shared-prefix requests that need more blocks than the pool has,
  so vLLM preempts) the exporter's counter deltas are exactly vLLM's, and they add up to
  what the client was told per request.
"""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from harness.run.commands import kvscope_command
from tests.integration.vllm_fixture import series, value
from tests.support.paths import ROOT
from tests.support.vllm_server import VllmServer, vllm_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
BLOCKS, BLOCK_SIZE = 10, 128
BURST, BURST_TOKENS = 6, 120
PREFIX = "You are the assistant of a railway timetable office. Answer in one short sentence. " * 10
COUNTERS = {  # canonical counter -> vLLM's sample
    "prefix_cache_queries_tokens": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits_tokens": "vllm:prefix_cache_hits_total",
    "preemptions": "vllm:num_preemptions_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "requests_finished": "vllm:request_success_total",
}
GAUGES = {
    "kv_usage_ratio": "vllm:kv_cache_usage_perc",
    "requests_running": "vllm:num_requests_running",
    "requests_waiting": "vllm:num_requests_waiting",
}
IDLE_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    with vllm_server(tmp_path_factory.mktemp("vllm"), "--num-gpu-blocks-override", str(BLOCKS)) as server:
        yield server


def client(server: VllmServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_the_capital_of_france_is_paris(vllm):
    answer = client(vllm).completions.create(
        model=vllm.model, prompt="The capital of France is", max_tokens=4, temperature=0
    )
    assert answer.choices[0].text.startswith(" Paris"), answer
    assert answer.usage.prompt_tokens == 5 and answer.usage.completion_tokens == 4


def inspect(source: str, stdin: str | None = None) -> dict:
    done = subprocess.run(
        kvscope_command("exporter", "inspect", source, "--json"),
        input=stdin, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["dialect"], doc["variant"]) == ("vllm", "v1"), doc
    return doc


def the_instance(doc: dict) -> dict:
    (inst,) = doc["instances"]
    assert (inst["model"], inst["instance"]) == ("smollm2", "0")
    return inst


def idle(server: VllmServer, finished: float) -> str:
    """/metrics once vLLM has counted `finished` requests and runs none (its stat loggers
    record a step's outcome after the response may already have left)."""
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    while time.monotonic() < deadline:
        text = server.metrics()
        busy = value(text, "vllm:num_requests_running") + value(text, "vllm:num_requests_waiting")
        if busy == 0 and value(text, "vllm:request_success_total") >= finished:
            return text
        time.sleep(0.2)
    raise AssertionError(f"vLLM not idle with {finished} requests finished after {IDLE_TIMEOUT_S}s")


def inspect_idle(server: VllmServer, finished: float) -> tuple[dict, str]:
    """`inspect URL` between two idle expositions that agree on every vLLM counter, so the
    one inspect read is the same as both."""
    before = idle(server, finished)
    inst = the_instance(inspect(server.url + "/metrics"))
    after = server.metrics()
    for family in COUNTERS.values():
        assert value(before, family) == value(after, family), family
    return inst, after


def agrees(inst: dict, text: str) -> None:
    for quantity, family in {**COUNTERS, **GAUGES}.items():
        assert inst[quantity] == value(text, family), quantity
    assert inst["requests_waiting"] == value(text, "vllm:num_requests_waiting_by_reason")
    ((labels, _),) = series(text, "vllm:cache_config_info").items()
    info = dict(labels)
    assert inst["kv_capacity_blocks"] == float(info["num_gpu_blocks"]) == BLOCKS
    assert inst["kv_block_size_tokens"] == float(info["block_size"]) == BLOCK_SIZE
    assert inst["kv_capacity_tokens"] == float(info["kv_cache_size_tokens"]) == BLOCKS * BLOCK_SIZE
    assert (inst["prefix_cache_unit"], inst["enable_prefix_caching"], inst["kv_cache_dtype"]) == (
        "tokens",
        True,
        "auto",
    )


def burst(server: VllmServer) -> tuple[list, str]:
    """BURST completions at once; the first exposition that shows them running."""
    api = client(server)

    def one(i: int):
        return api.completions.create(
            model=server.model,
            prompt=PREFIX + f"Question {i}: which platform for train {i}?",
            max_tokens=BURST_TOKENS,
            temperature=0,
            extra_body={"ignore_eos": True},
        )

    during = None
    with ThreadPoolExecutor(BURST) as pool:
        futures = [pool.submit(one, i) for i in range(BURST)]
        while during is None and not all(f.done() for f in futures):
            text = server.metrics()
            if value(text, "vllm:num_requests_running") > 0 and value(text, "vllm:kv_cache_usage_perc") > 0:
                during = text
            time.sleep(0.2)
        answers = [f.result() for f in futures]
    assert during is not None, "the burst finished before /metrics showed it running"
    return answers, during


def test_inspect_reads_vllms_own_series_and_exact_counter_deltas_across_a_burst(vllm):
    start = value(vllm.metrics(), "vllm:request_success_total")
    before, raw_before = inspect_idle(vllm, start)
    agrees(before, raw_before)
    assert before["requests_running"] == before["requests_waiting"] == before["kv_usage_ratio"] == 0

    answers, during_text = burst(vllm)
    during = the_instance(inspect("-", stdin=during_text))
    agrees(during, during_text)
    assert during["requests_running"] > 0 and 0 < during["kv_usage_ratio"] <= 1

    after, raw_after = inspect_idle(vllm, start + BURST)
    agrees(after, raw_after)
    delta = {q: after[q] - before[q] for q in COUNTERS}
    assert delta == {q: value(raw_after, f) - value(raw_before, f) for q, f in COUNTERS.items()}
    assert delta["requests_finished"] == BURST
    assert (
        delta["generation_tokens"] == sum(a.usage.completion_tokens for a in answers) == BURST * BURST_TOKENS
    )
    assert (
        delta["prompt_tokens"]
        == sum(a.usage.prompt_tokens for a in answers)
        == delta["prefix_cache_queries_tokens"]
    )
    assert delta["preemptions"] > 0, "the burst needs more blocks than the pool has: vLLM preempts"
    # every request after the first finds the shared prefix's first block cached
    assert delta["prefix_cache_hits_tokens"] >= (BURST - 1) * BLOCK_SIZE
