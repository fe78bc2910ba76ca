"""A real vLLM (0.32's CPU build) started by `kvscope run --serve`, with a 10-block pool that 8
shared-prefix users overrun: the run is advised without --deployment (the replay runs on the
pool vLLM publishes, step times fitted to its OTLP spans and the run's own requests), and
`--verify-only add_memory` applies that verdict as --num-gpu-blocks-override, restarts vLLM,
reruns the same workload and scores the prediction. Three vLLM starts (the run, the unchanged
rerun, the change): the slowest test of the suite, so it checks one verdict only."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import psutil
import pytest

from tests.support.prometheus import free_port
from tests.support.servers import kvscope_run
from tests.support.vllm_server import command

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
ENV = (
    "VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 "
    "TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_DO_NOT_TRACK=1"
)


@pytest.fixture(scope="module")
def verified(tmp_path_factory) -> tuple[Path, int, str]:
    out = tmp_path_factory.mktemp("vllm") / "b"
    port = free_port()
    serve = f"{ENV} {shlex.join(command(port, '--num-gpu-blocks-override', '10'))}"
    rc, log, _ = kvscope_run(
        "--serve", serve, "--startup-timeout", "900", "--otlp", "--workload", "shared_prefix", "--users", "8",
        "--duration", "30s", "--num-prefixes", "4", "--prefix-tokens", "192", "--suffix-tokens", "32",
        "--output-tokens", "48", "--drain-timeout", "60", "--verify-only", "add_memory", "--out", str(out),
        timeout_s=2300,
    )  # fmt: skip
    assert rc == 0, log
    return out, port, log


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_the_advice_replays_a_vllm_run_from_what_it_published(verified) -> None:
    out, _, _ = verified
    advice = _json(out / "advice.json")
    dep = advice["deployment"]
    assert not dep["bundled_engine"] and dep["model"] is None and dep["gpu"] is None  # no --deployment
    assert dep["num_blocks"] == 10 and dep["block_size"] == 128
    add = {v["action"]: v for v in advice["verdicts"]}["add_memory"]
    assert add["replay"] and add["status"] in ("verified", "indicative"), add
    basis = add["replay"]["basis"]
    assert basis["pool"].startswith("10 blocks of 128 tokens, as the server published")
    assert "otlp:vllm" in basis["step_times"] and "max_num_seqs=8" in basis["assumed"]
    assert advice["fidelity"]["measured"]["ttft_source"] == "server"
    assert "replays" not in {n for m in advice["missing_facts"] for n in m["needed_for"]}


def test_add_memory_is_applied_as_the_block_override_rerun_and_scored(verified) -> None:
    out, port, log = verified
    add = {v["action"]: v for v in _json(out / "advice.json")["verdicts"]}["add_memory"]
    check, blocks = add["check"], str(add["projected"]["pool_blocks"])
    assert check["change"]["flags"] == ["--num-gpu-blocks-override", blocks]
    served = _json(out / "verify" / "add_memory" / "run.json")["serve"]["argv"]
    assert served[served.index("--num-gpu-blocks-override") + 1] == blocks
    assert served.count("--num-gpu-blocks-override") == 1
    assert (
        check["as_run"]["preemptions"] > 0
        and check["measured"]["preemptions"] < check["as_run"]["preemptions"]
    )
    assert check["status"] == "confirmed", check
    assert f"kvscope verify: add_memory (--num-gpu-blocks-override {blocks}): confirmed" in log
    others = [v for v in _json(out / "advice.json")["verdicts"] if v["action"] != "add_memory"]
    assert all(v.get("check") is None for v in others)  # --verify-only
    leftover = [
        p.info["cmdline"]
        for p in psutil.process_iter(["cmdline"])
        if str(port) in " ".join(p.info["cmdline"] or [])
    ]
    assert not leftover, leftover
