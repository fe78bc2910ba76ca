"""`kvscope advise` as an operator runs it: on a bundle (advice.json, the report's Advice
section), on a --target bundle described on the command line, live against a running
exporter, and with bad input (exit 2 and one line, never a traceback)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from exporter.app import make_app
from exporter.runner import Exporter, Options
from exporter.scrape import Target
from harness.bundle.deployment import BUNDLED, of_config
from harness.run.commands import kvscope_command
from reference_engine.config import EngineConfig
from reference_engine.sim.engine import SimSpec
from tests.exporter.test_exporter_app import wait_scraped
from tests.harness.advisor.bundles import long_requests, simulate_bundle
from tests.support.paths import ROOT
from tests.support.prometheus import serve_app
from tests.support.synthetic_metrics import EngineState, vllm_v1_exposition


def kvscope(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        kvscope_command(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def cpu_bundle(tmp_path_factory) -> Path:
    """A preempting run of the bundled CPU engine (48 blocks, tiny-random): fast to advise."""
    engine = EngineConfig(model="tiny-random", num_blocks=48, max_num_seqs=16, max_num_batched_tokens=512)
    return simulate_bundle(
        tmp_path_factory.mktemp("cpu"),
        long_requests(30, 0.05, prompt=(40, 80), output=(150, 250)),
        None,
        engine,
    )


def _write_deployment(folder: Path, spec: SimSpec | None, **engine) -> None:
    """run.json recording a bundled engine (or simulator, with `spec`) configured as given."""
    kind = "bundled simulator" if spec else "bundled engine"
    facts = of_config(kind, {**asdict(EngineConfig()), **engine}, asdict(spec) if spec else None, BUNDLED)
    (folder / "run.json").write_text(json.dumps({"deployment": facts.to_json()}))


def copy(bundle: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(bundle, tmp_path / "b"))


def test_advise_writes_advice_json_and_the_report_advice_section(cpu_bundle, tmp_path):
    folder = copy(cpu_bundle, tmp_path)
    out = kvscope("advise", str(folder))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("## Advice") and "verified by replay" in out.stdout
    advice = json.loads((folder / "advice.json").read_text())
    actions = {v["action"] for v in advice["verdicts"]}
    assert {"quantize_kv_cache", "add_memory"} <= actions
    assert all(
        {"action", "title", "evidence", "projected", "effect", "replay", "verified"} <= set(v)
        for v in advice["verdicts"]
    )
    assert advice["markdown"].startswith("## Advice")
    report = folder / "report.md"
    if report.exists():  # harness.report is there: the Advice section comes first
        text = report.read_text()
        assert "Advice" in text and advice["verdicts"][0]["title"] in text
        assert text.index(advice["verdicts"][0]["title"]) < text.index("\n## ", text.index("## Advice") + 10)
    else:
        assert (folder / "advice.md").read_text() == advice["markdown"]


def test_advise_json_and_no_replay(cpu_bundle, tmp_path):
    out = kvscope("advise", str(copy(cpu_bundle, tmp_path)), "--json", "--no-replay")
    assert out.returncode == 0, out.stderr
    advice = json.loads(out.stdout)
    assert advice["verdicts"] and all(v["replay"] is None and not v["verified"] for v in advice["verdicts"])


def test_a_target_run_is_sized_from_the_command_line(tmp_path):
    """A --target run records no engine flags: what the server did not state is not invented.
    Without a cache dtype there is no quantize verdict and no replay, and the advice names the
    facts and the --deployment keys; stated (the short flags and --deployment are the same
    statements), the replay keeps the pool the exporter saw (kv_capacity_blocks)."""
    spec, engine = (
        SimSpec("llama-3.1-70b", "h100-80gb", 2, 0.9),
        EngineConfig(max_model_len=8192, max_num_seqs=256),
    )
    folder = simulate_bundle(tmp_path / "t", long_requests(30, 0.5), spec, engine)
    run = json.loads((folder / "run.json").read_text())
    target = {"target": "http://gpu-box:8000", "bundled_engine": False, "deployment": {"server": "target"}}
    (folder / "run.json").write_text(json.dumps({**run, **target}))
    bare = json.loads(kvscope("advise", str(folder), "--json").stdout)
    assert bare["deployment"]["gpu"] is None and bare["deployment"]["num_blocks"] == 1445
    assert bare["diagnosis"]["kv_pressure"] and "quantize_kv_cache" not in {
        v["action"] for v in bare["verdicts"]
    }
    assert not any(v["verified"] or v["replay"] for v in bare["verdicts"])
    lacking = {m["fact"]: m for m in bare["missing_facts"]}
    assert lacking["kv_cache_dtype"]["supply"] == "--deployment kv-cache-dtype=auto|fp8|int8"
    assert "quantize_kv_cache" in lacking["kv_cache_dtype"]["needed_for"]
    assert {"model", "gpu", "max_num_seqs", "max_num_batched_tokens"} <= set(lacking)
    assert "--deployment max-num-seqs=N" in bare["markdown"]
    out = kvscope(
        "advise",
        str(folder),
        "--json",
        "--model",
        "llama-3.1-70b",
        "--gpu",
        "h100-80gb",
        "--tp",
        "2",
        "--max-model-len",
        "8192",
        "--deployment",
        "kv-cache-dtype=auto,max-num-seqs=256,max-num-batched-tokens=2048,allocator=paged,"
        "enable-prefix-caching=true,gpu-memory-utilization=0.9",
    )
    assert out.returncode == 0, out.stderr
    advice = json.loads(out.stdout)
    assert advice["deployment"]["gpu"] == "h100-80gb" and advice["deployment"]["num_blocks"] == 1445
    assert advice["missing_facts"] == []
    q = next(v for v in advice["verdicts"] if v["action"] == "quantize_kv_cache")
    assert q["projected"]["pool_blocks"] == 2890 and q["verified"]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "server.parquet").unlink(), "missing server.parquet"),
        (lambda d: (d / "run.json").write_text("{not json"), "run.json is not valid JSON"),
        (lambda d: _write_deployment(d, SimSpec(model="llama-9000")), "unknown model 'llama-9000'"),
        (lambda d: _write_deployment(d, SimSpec(gpu="tpu-v9")), "unknown GPU 'tpu-v9'"),
        (lambda d: _write_deployment(d, None, num_blocks="many"), "do not parse"),
        (
            lambda d: pd.DataFrame({"x": [1]}).to_parquet(d / "requests.parquet"),
            "lacks column(s) send_time_unix",
        ),
    ],
)
def test_broken_bundles_exit_2_with_one_line(cpu_bundle, tmp_path, damage, message):
    folder = copy(cpu_bundle, tmp_path)
    damage(folder)
    out = kvscope("advise", str(folder))
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("DIR", "--live", "http://x"),
        ("DIR", "--gpu", "tpu-v9"),
        ("DIR", "--model", "llama-9000"),
        ("/nonexistent/bundle",),
    ],
)
def test_bad_command_lines_exit_2(cpu_bundle, tmp_path, args):
    folder = copy(cpu_bundle, tmp_path)
    out = kvscope("advise", *[str(folder) if a == "DIR" else a for a in args])
    assert out.returncode == 2 and out.stderr.startswith("kvscope advise: error:"), out.stderr
    assert "Traceback" not in out.stderr


class _Engine:
    """A vLLM V1 /metrics whose counters move each scrape: `pressure` preempts on a full
    cache; otherwise requests wait with the cache nearly empty."""

    def __init__(self, pressure: bool) -> None:
        self.pressure = pressure
        self.state = EngineState(running=8 if pressure else 2, waiting=4, kv_usage=0.99 if pressure else 0.05)

    def app(self):
        from aiohttp import web

        async def metrics(request):
            s = self.state
            s.preemptions += 1 if self.pressure else 0
            s.finished["length"] += 2
            s.prompt_tokens += 100
            s.generation_tokens += 50
            body = vllm_v1_exposition([s], model="m", cache_dtype="auto", gpu_memory_utilization=0.8)
            return web.Response(text=body, content_type="text/plain")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        return app


def test_live_advice_from_a_running_exporter():
    async def scenario():
        async with serve_app(_Engine(True).app()) as hot, serve_app(_Engine(False).app()) as idle:
            exporter = Exporter(
                [Target("hot", hot + "/metrics"), Target("idle", idle + "/metrics")],
                Options(interval=0.2, window=30),
            )
            async with serve_app(make_app(exporter)) as url:
                await wait_scraped(exporter, 12)  # 2.4 s of samples at the 0.2 s interval
                text = await asyncio.to_thread(kvscope, "advise", "--live", url, "--window", "1m")
                js = await asyncio.to_thread(kvscope, "advise", "--live", url, "--json")
                return text, js

    text, js = asyncio.run(scenario())
    assert text.returncode == 0, text.stderr
    results = {r["diagnosis"]["target"]: r for r in json.loads(js.stdout)}
    hot = {v["action"] for v in results["hot"]["verdicts"]}
    assert {"quantize_kv_cache", "add_memory", "raise_memory_utilization"} <= hot
    assert results["hot"]["diagnosis"]["kv_pressure"]
    assert [v["action"] for v in results["idle"]["verdicts"]] == ["kv_not_bottleneck"]
    assert all(not v["verified"] for r in results.values() for v in r["verdicts"])
    assert "hot" in text.stdout and "kv_not_bottleneck" in text.stdout
