"""`kvscope run` against the real vLLM (0.32's CPU build, SmolLM2-135M; tests/support/vllm_server),
the acceptance of issue 31's run-side half. Two vLLM starts in all (each costs minutes here):

- one for the module: a 10-block pool (`--num-gpu-blocks-override 10 --max-model-len 1024`) that 8
  users of the shared-prefix workload keep preempting (prompts of ~300 tokens take 3 blocks, and
  each answer of 128 tokens needs a 4th at token 384 that a full pool does not have), request
  spans exported to the run's receiver, KV events published on an ipc:// endpoint (vLLM binds
  it; loopback only) with a replay ROUTER on 127.0.0.1. The run uses `--otlp-listen` and
  `--kv-events auto`; its figures are checked against vLLM's own counters read before and after.
- one that is killed mid-run, its publisher configured connect-style (`tcp://127.0.0.1:PORT`,
  no '*': vLLM connects), as the issue found it: auto binds it here and says so, events flow
  until the kill, and the run ends within 5 s of it with exit 4.

Without calibration, so the counters' deltas hold the measured requests only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.parse import parse_exposition
from harness.bundle.kv_events import read_kv_events
from harness.results import load
from harness.run.commands import kvscope_command
from harness.run.procs import free_port
from tests.support.paths import ROOT
from tests.support.servers import kvscope_run
from tests.support.target_loss import failures_after, leftover_children
from tests.support.vllm_server import vllm_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]
BLOCK = 128  # vLLM's block size on CPU
SPAN_ENV = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf", "OTEL_BSP_SCHEDULE_DELAY": "500"}
VLLM_KEYS = {"enable_kv_cache_events", "publisher", "endpoint", "replay_endpoint", "buffer_steps", "hwm",
             "max_queue_size", "topic"}  # fmt: skip


@dataclass(frozen=True)
class Counters:
    preemptions: float
    queries: float
    hits: float

    @classmethod
    def read(cls, metrics: str) -> Counters:
        rows = parse_exposition(metrics).samples

        def total(name: str) -> float:
            return sum(value for _, value in rows[name])

        return cls(
            total("vllm:num_preemptions_total"),
            total("vllm:prefix_cache_queries_total"),
            total("vllm:prefix_cache_hits_total"),
        )


def _warm_up(server) -> None:
    """One request of the run's size before the counters are read, so whatever a first request
    costs a fresh server is not paid inside the run's 40 s (a CI run once completed 3 requests
    in them)."""
    body = {"model": server.model, "prompt": "the cache " * 150, "max_tokens": 16, "ignore_eos": True}
    request = urllib.request.Request(
        server.url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as resp:
        assert json.loads(resp.read())["usage"]["completion_tokens"] == 16


def _progress_lines(log: Path) -> list[str]:
    """vLLM logs its throughput, running and waiting requests and KV usage every 10 s: shown
    beside the run's figures, they tell a slow server from a stalled one."""
    lines = log.read_text(errors="replace").splitlines()
    return [line for line in lines if "Avg generation throughput" in line][-12:]


def _kv_config(endpoint: str, replay: str) -> str:
    return json.dumps({"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": endpoint,
                       "replay_endpoint": replay, "topic": "kv"})  # fmt: skip


@pytest.fixture(scope="module")
def preempting_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm")
    otlp_port = free_port()
    pub, replay = f"ipc://{tmp}/kv-events", f"tcp://127.0.0.1:{free_port()}"
    with vllm_server(
        tmp, "--num-gpu-blocks-override", "10", "--enable-prompt-tokens-details",
        "--kv-events-config", _kv_config(pub, replay),
        "--otlp-traces-endpoint", f"http://127.0.0.1:{otlp_port}/v1/traces", env=SPAN_ENV,
    ) as server:  # fmt: skip
        stated = server.get_json("/kv_event_sources")
        _warm_up(server)
        before = Counters.read(server.metrics())
        rc, log, _ = kvscope_run(
            "--target", server.url, "--workload", "shared_prefix", "--users", "8", "--duration", "40s",
            "--output-tokens", "128", "--length-spread", "0",
            "--no-calibrate", "--no-advise", "--otlp-listen", f"127.0.0.1:{otlp_port}", "--kv-events", "auto",
            "--out", str(tmp / "b"), timeout_s=400,
        )  # fmt: skip
        after = Counters.read(server.metrics())
    bundle = load(tmp / "b")
    kv_line = next((x for x in log.splitlines() if x.startswith("kv events: ")), "no kv events line")
    classes = bundle.requests["error_class"].value_counts().to_dict()
    print(
        f"vLLM run: {len(bundle.requests)} requests (failed: {classes or 'none'}), "
        f"{bundle.run['spans']['join']['joined']} joined to their span, "
        f"{after.preemptions - before.preemptions:.0f} preemptions by vLLM's counter; {kv_line}\n"
        "vLLM's own progress lines:\n" + "\n".join(_progress_lines(server.log))
    )
    assert rc == 0, log  # after the figures above, which a failure shows
    yield stated, bundle, before, after, log, (pub, replay)


def test_the_server_states_its_publisher_as_kvscope_reads_it(preempting_run):
    stated, bundle, *_, (pub, replay) = preempting_run
    assert list(stated) == ["0"] and set(stated["0"]) == VLLM_KEYS
    assert (stated["0"]["endpoint"], stated["0"]["replay_endpoint"]) == (pub, replay)
    kv = bundle.run["kv_events"]
    assert kv["stated"] == stated and kv["notes"] == []
    (source,) = kv["sources"]
    assert (source["endpoint"], source["replay_endpoint"], source["topic"]) == (pub, replay, "kv")
    assert source["connected"] and not source["bind"]


def test_preemptions_and_the_hit_ratio_are_the_servers_counters(preempting_run):
    _, bundle, before, after, _, _ = preempting_run
    server = bundle.summary["server"]
    assert after.preemptions - before.preemptions > 0, "the 10-block pool must preempt"
    assert server["preemptions"] == after.preemptions - before.preemptions
    queries, hits = after.queries - before.queries, after.hits - before.hits
    assert server["prefix_hit_ratio"] == pytest.approx(hits / queries, rel=1e-12)


def test_nearly_every_successful_request_is_joined_to_its_span(preempting_run):
    _, bundle, *_ = preempting_run
    ok = bundle.requests[bundle.requests["ok"]]
    assert len(ok) >= 20 and len(ok) == len(bundle.requests)
    join = bundle.run["spans"]["join"]
    assert join["joined"] >= 0.95 * len(ok), join
    assert (ok["server_timing_source"] == "otlp:vllm").mean() >= 0.95


def test_kv_events_account_for_every_computed_prompt_block(preempting_run):
    """vLLM counts a new request's prompt tokens as queried and its cached ones as hits, and
    stores (BlockStored) every full block it computes: the per-request misses add up to the
    counters', and the stored blocks are at least the full prompt blocks the misses imply
    (a request's partial last block is never stored; decode and recomputation store more)."""
    _, bundle, before, after, log, _ = preempting_run
    ok = bundle.requests[bundle.requests["ok"]]
    assert ok["cached_tokens"].notna().all()  # --enable-prompt-tokens-details
    assert ok["prompt_tokens"].sum() == after.queries - before.queries
    assert ok["cached_tokens"].sum() == after.hits - before.hits
    full_prompt_blocks = (ok["prompt_tokens"] // BLOCK - ok["cached_tokens"] // BLOCK).sum()
    kv = bundle.run["kv_events"]
    assert kv["batches"] > 0 and kv["stored_blocks"] >= full_prompt_blocks > 0, (kv, full_prompt_blocks)
    assert kv["removed_blocks"] > 0  # a 10-block pool evicts
    assert kv["lost_batches"] == 0
    line = next(x for x in log.splitlines() if x.startswith("kv events: "))
    assert (
        line.startswith(f"kv events: {kv['batches']} batches (") and f"{kv['stored_blocks']} blocks" in line
    )
    frame = read_kv_events(bundle.path)
    assert frame is not None and frame.iloc[-1]["block_size"] == BLOCK


def test_a_vllm_killed_mid_run_ends_the_run_within_seconds(tmp_path):
    """Its publisher connects (no '*'), so auto binds the address here and says so; killed mid-run,
    the run exits 4 within 5 s, with few failures recorded after the kill, its bundle written and
    none of its children left."""
    pub = f"tcp://127.0.0.1:{free_port()}"
    out = tmp_path / "b"
    with vllm_server(
        tmp_path, "--kv-events-config", _kv_config(pub, f"tcp://127.0.0.1:{free_port()}")
    ) as server:
        proc = subprocess.Popen(
            kvscope_command("run", "--quiet", "--target", server.url, "--workload", "shared_prefix",
                            "--users", "4", "--duration", "120s", "--no-calibrate", "--kv-events", "auto",
                            "--out", str(out)),
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            _wait_for_batches_and_records(out, proc, records=4)
        finally:
            kill_unix, killed = time.time(), time.monotonic()
            os.killpg(server.pid, signal.SIGKILL)  # API server and engine core: a crash, no goodbye
        log, _ = proc.communicate(timeout=120)
        exited_after = time.monotonic() - killed
    assert proc.returncode == 4, log
    assert exited_after < 5.0, (exited_after, log)
    after = failures_after(out / "raw" / "records.jsonl", kill_unix)
    assert 0 < after < 50, (after, log)
    run = json.loads((out / "run.json").read_text())
    assert run["target_lost"]["code"] == "target_lost" and run["exit"]["code"] == 4
    assert (out / "requests.parquet").exists() and (out / "summary.json").exists()
    assert leftover_children(out / "run.json") == []
    assert f"kvscope binds {pub} itself" in log and "[kv_events_connect_style_bound]" in log
    kv = run["kv_events"]
    assert [n["code"] for n in kv["notes"]] == ["kv_events_connect_style_bound"] and kv["batches"] > 0
    print(
        f"killed vLLM: exit {proc.returncode} {exited_after:.2f} s after the kill, {after} failures after it"
    )


def _wait_for_batches_and_records(out: Path, proc: subprocess.Popen, records: int) -> None:
    """Until the run has `records` records and its exporter has recorded a KV event batch."""
    deadline = time.monotonic() + 300
    path, kv = out / "raw" / "records.jsonl", out / "raw" / "exporter" / "kv_events"
    while time.monotonic() < deadline and proc.poll() is None:
        done = path.exists() and len(path.read_text().splitlines()) >= records
        if done and kv.is_dir() and any(f.stat().st_size for f in kv.glob("*.jsonl")):
            return
        time.sleep(0.5)
    raise AssertionError(f"no {records} records and KV events: {proc.poll()}")
