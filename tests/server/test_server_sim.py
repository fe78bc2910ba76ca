"""Simulation mode: the pool is sized like the named deployment (checked against the sizing
arithmetic done by hand here), steps take the cost model's time, tokens are real SmolLM2 text,
and one server process sustains 500 concurrent streams with metrics that add up."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reference_engine.config import EngineConfig
from reference_engine.sampling_params import SamplingParams
from reference_engine.sim.engine import SimSpec, build_sim_engine, load_sim_tokenizer
from tests.support.paths import ROOT

pytestmark = pytest.mark.slow
GiB = 1 << 30


def llama70b_blocks_by_hand(
    tp: int, utilisation: float = 0.9, kv_bytes: int = 2, block_size: int = 16, weight_bytes: int = 2
) -> int:
    """vLLM's arithmetic, from Llama-3.1-70B's config.json and the H100's reported memory."""
    layers, hidden, heads, kv_heads, head_dim, inter, vocab = 80, 8192, 64, 8, 128, 28672, 128256
    per_layer = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + 3 * hidden * inter
    params = layers * per_layer + 2 * vocab * hidden  # untied embeddings: ~70.55e9
    weights_per_gpu = -(-params * weight_bytes // tp)  # bf16 unless fp8
    memory = round(79.15 * GiB)  # what CUDA reports for an H100 80GB
    budget = int(memory * utilisation) - weights_per_gpu - 2 * GiB  # 2 GiB activations, CUDA graphs, ...
    kv_per_token = layers * 2 * (kv_heads // tp) * head_dim * kv_bytes
    return budget // (kv_per_token * block_size)


@pytest.fixture(scope="module")
def tokenizer():
    return load_sim_tokenizer()


@pytest.mark.parametrize(
    "tp,kv_dtype,weights", [(2, "auto", "auto"), (4, "auto", "auto"), (4, "fp8", "auto"), (1, "auto", "fp8")]
)
def test_block_count_matches_the_sizing_arithmetic(tokenizer, tp, kv_dtype, weights):
    built = build_sim_engine(
        SimSpec("llama-3.1-70b", "h100-80gb", tp, 0.9, weights),
        EngineConfig(max_model_len=8192, kv_cache_dtype=kv_dtype),
        tokenizer=tokenizer,
    )
    expected = llama70b_blocks_by_hand(
        tp, kv_bytes=1 if kv_dtype == "fp8" else 2, weight_bytes=1 if weights == "fp8" else 2
    )
    assert abs(built.num_blocks - expected) <= 1, (built.num_blocks, expected)
    assert built.engine.kv.pool.num_blocks == built.num_blocks


def test_steps_take_the_modelled_time_and_text_is_real(tokenizer):
    built = build_sim_engine(
        SimSpec("llama-3.1-70b", "h100-80gb", 4), EngineConfig(max_model_len=4096), tokenizer=tokenizer
    )  # ~15 ms steps: long enough that timer jitter is small
    engine, executor = built.engine, built.executor
    request = engine.add_request("Tell me about the weather.", SamplingParams(max_tokens=40, n=2, seed=5))
    group = engine.groups[request.request_id]
    started = step_start = time.monotonic()
    while engine.has_unfinished():  # what the server's engine loop does: back-to-back steps, paced
        executor.begin_step(step_start)
        engine.step()
        step_start = time.monotonic()
    elapsed = time.monotonic() - started
    texts = [
        group.detokenizers[s.request_id].final_text() for s in sorted(group.sequences, key=lambda s: s.index)
    ]
    modelled = built.executor.modelled_total_s
    assert modelled > 0.5 and abs(elapsed - modelled) / modelled < 0.1
    # Per step, the median ratio (single sleeps can overshoot on a busy 2-core machine).
    ratios = sorted(r.measured_s / r.modelled_s for r in built.executor.records)
    assert ratios[len(ratios) // 2] == pytest.approx(1.0, rel=0.1)
    text0, text1 = texts
    assert text0 != text1 and len(text0.split()) == 40  # word tokens: one word per token
    assert len(tokenizer.encode(text0, add_special_tokens=False)) == 40  # re-tokenizes to the same count
    again = engine.generate(["Tell me about the weather."], SamplingParams(max_tokens=40, n=2, seed=5))[0]
    assert again.texts == texts  # seeded draws repeat


# -- 500 concurrent streams against a server process -------------------------------------------


class SimServer:
    def __init__(self, *args: str):
        cmd = [sys.executable, "-m", "harness.cli", "engine", "serve", "--port", "0", "--simulate", *args]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self.stderr: list[str] = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        line = self.proc.stdout.readline()
        assert "listening on" in line, (line, self.stderr)
        self.url = line.strip().rsplit(" ", 1)[1]

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(60)


async def _one_stream(session: aiohttp.ClientSession, url: str, i: int) -> dict:
    body = {
        "model": "llama-3.1-70b",
        "prompt": f"Request {i}: " + "please describe the ocean " * (1 + i % 5),
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.monotonic()
    first = None
    text = ""
    last = None
    async with session.post(url + "/v1/completions", json=body) as response:
        assert response.status == 200
        async for line in response.content:
            if not line.startswith(b"data: "):
                continue
            data = line[6:].strip()
            if data == b"[DONE]":
                break
            last = json.loads(data)
            for choice in last["choices"]:
                first = first or time.monotonic()
                text += choice["text"]
    return {"ttft": first - started, "text": text, "usage": last["usage"], "kvscope": last["kvscope"]}


async def _run_streams(url: str, n: int, scrape_midway: list) -> list[dict]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=300)
    ) as session:
        tasks = [asyncio.ensure_future(_one_stream(session, url, i)) for i in range(n)]
        # Scrape all along rather than once at a fixed moment: on a fast machine the streams may
        # all be done within a second, on a slow one none may have arrived yet.
        while not all(task.done() for task in tasks):
            async with session.get(url + "/metrics") as response:
                scrape_midway.append(await response.text())
            await asyncio.sleep(0.05)
        return await asyncio.gather(*tasks)


def values(text: str) -> dict[tuple[str, str | None], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, s.labels.get("finished_reason"))] = s.value
    return out


def test_500_concurrent_streams_with_consistent_metrics():
    server = SimServer(
        "--sim-model",
        "llama-3.1-70b",
        "--sim-gpu",
        "h100-80gb",
        "--tensor-parallel-size",
        "4",
        "--max-num-seqs",
        "512",
        "--max-num-batched-tokens",
        "16384",
        "--max-model-len",
        "8192",
    )
    try:
        midway: list[str] = []
        started = time.monotonic()
        results = asyncio.run(_run_streams(server.url, 500, midway))
        elapsed = time.monotonic() - started
        with urllib_open(server.url + "/metrics") as response:
            final = values(response.read().decode())
    finally:
        assert server.stop() == 0
    assert len(results) == 500 and elapsed < 120
    assert all(r["usage"]["completion_tokens"] == 16 for r in results)
    assert all(len(r["text"].split()) == 16 for r in results)
    during = [values(text) for text in midway]
    busiest = max(
        d[("vllm:num_requests_running", None)] + d[("vllm:num_requests_waiting", None)] for d in during
    )
    assert busiest > 0, f"no scrape out of {len(during)} saw a request in the engine"
    assert all(d[("vllm:num_requests_running", None)] <= 512 for d in during)  # --max-num-seqs holds
    assert final[("vllm:request_success_total", "length")] == 500
    assert final[("vllm:generation_tokens_total", None)] == 500 * 16
    assert final[("vllm:prompt_tokens_total", None)] == sum(r["usage"]["prompt_tokens"] for r in results)
    assert final[("vllm:e2e_request_latency_seconds_count", None)] == 500
    assert final[("vllm:inter_token_latency_seconds_count", None)] == 500 * 15
    assert final[("vllm:prefix_cache_hits_total", None)] == sum(
        r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in results
    )
    assert final[("vllm:kv_cache_usage_perc", None)] == 0.0
    assert final[("vllm:num_requests_running", None)] == 0.0
    ttft_server = sorted(r["kvscope"]["ttft_s"] for r in results)
    print(
        f"500 streams in {elapsed:.1f} s; server TTFT p50 {ttft_server[250]:.3f} s, p99 "
        f"{ttft_server[494]:.3f} s"
    )


def urllib_open(url: str):
    import urllib.request

    return urllib.request.urlopen(url, timeout=30)


def test_a_burst_of_connections_waits_in_the_backlog_while_the_server_is_busy():
    # A server that cannot accept for a moment (stopped here) still completes every handshake
    # of a burst: aiohttp's default backlog of 128 dropped the SYNs past it, and those clients
    # retried a second later (a TTFT of 1 s that was no one's queue).
    server = SimServer(
        "--sim-model", "llama-3.1-70b", "--sim-gpu", "h100-80gb", "--tensor-parallel-size", "4"
    )
    port = int(server.url.rsplit(":", 1)[1])
    socks = [socket.socket() for _ in range(300)]
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        for s in socks:
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
        pending, deadline = set(socks), time.monotonic() + 0.8  # before a SYN's first retry
        while pending and time.monotonic() < deadline:
            _, writable, _ = select.select([], list(pending), [], 0.1)
            pending -= set(writable)
        connected = sum(
            s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for s in socks if s not in pending
        )
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        for s in socks:
            s.close()
        assert server.stop() == 0
    assert connected == len(socks)
