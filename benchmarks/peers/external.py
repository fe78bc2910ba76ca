"""AIPerf and GuideLLM, run from the venvs scripts/install_peers.sh makes, on the same
requests as the other clients, and their own exports read back.

Both need a Hugging Face tokenizer to build prompts of a given length; nothing may be
downloaded, so the server's own (SmolLM2's, rebuilt from the GGUF file the simulator uses)
is written as a local tokenizer folder: prompts are then exactly PROMPT_WORDS tokens as
the server counts them. AIPerf: `aiperf profile` with synthetic prompts, concurrency mode,
its JSON export (`profile_export_aiperf.json`: per-request TTFT and ITL aggregated, in ms).
GuideLLM: `guidellm run` with a scenario file (concurrent profile, synthetic text, a
max-duration constraint), its `benchmarks.json` (successful requests' metrics, in ms).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from benchmarks.peers.result import Result

ROOT = Path(__file__).resolve().parents[2]
PEERS = Path(os.environ.get("KVSCOPE_PEERS", ROOT / ".venv-peers"))
PROMPT_TOKENS = 128
OUTPUT_TOKENS = 128
GRACE_S = 60  # in-flight requests may finish after the duration


def tool(name: str) -> Path:
    return PEERS / name / "bin" / name


def missing(name: str):
    def check() -> str | None:
        return None if tool(name).exists() else f"not installed ({tool(name)} absent)"

    return check


def tokenizer_dir(work: Path) -> Path:
    from reference_engine.sim.engine import load_sim_tokenizer

    folder = work / "tokenizer"
    if not (folder / "tokenizer.json").exists():
        folder.mkdir(parents=True, exist_ok=True)
        load_sim_tokenizer().backend.save(str(folder / "tokenizer.json"))
        (folder / "tokenizer_config.json").write_text(
            json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>"})
        )
    return folder


def aiperf_command(url: str, model: str, streams: int, seconds: float, work: Path):
    return [
        str(tool("aiperf")), "profile", "--model", model, "--url", url, "--endpoint-type", "completions",
        "--streaming", "--concurrency", str(streams), "--benchmark-duration", f"{seconds:g}",
        "--benchmark-grace-period", str(GRACE_S), "--isl", str(PROMPT_TOKENS), "--isl-stddev", "0",
        "--osl", str(OUTPUT_TOKENS), "--extra-inputs", "ignore_eos:true",
        "--tokenizer", str(tokenizer_dir(work)),
        "--output-artifact-dir", str(work / "aiperf"), "--ui-type", "none", "--no-server-metrics",
        "--no-gpu-telemetry",
    ], {}  # fmt: skip


def aiperf_result(work: Path) -> Result:
    d = json.loads((work / "aiperf" / "profile_export_aiperf.json").read_text())
    ttft, itl = d["time_to_first_token"], d["inter_token_latency"]
    return Result(ttft["p50"] / 1000, ttft["p99"] / 1000, ttft["avg"] / 1000, itl["avg"] / 1000)


def guidellm_scenario(url: str, model: str, streams: int, seconds: float, work: Path) -> dict[str, Any]:
    return {
        "metadata": {"name": "kvscope-peers", "description": "benchmarks/peer_clients.py"},
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": url,
                "model": model,
                "request_format": "/v1/completions",
                "extras": {"body": {"ignore_eos": True}},
            },
            "profile": {"kind": "concurrent", "streams": streams},
            "data": [
                {"kind": "synthetic_text", "prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS}
            ],
            "tokenizer": {"kind": "huggingface_auto", "model": str(tokenizer_dir(work))},
            "constraints": [{"kind": "max_duration", "seconds": seconds}],
            "outputs": [{"kind": "json", "path": str(work / "benchmarks.json")}],
        },
    }


def guidellm_command(url: str, model: str, streams: int, seconds: float, work: Path):
    scenario = work / "scenario.json"
    scenario.write_text(json.dumps(guidellm_scenario(url, model, streams, seconds, work)))
    return [str(tool("guidellm")), "run", "-c", str(scenario), "--disable-console-interactive"], {}


def guidellm_result(work: Path) -> Result:
    metrics = json.loads((work / "benchmarks.json").read_text())["benchmarks"][0]["metrics"]
    ttft, itl = (
        metrics["time_to_first_token_ms"]["successful"],
        metrics["inter_token_latency_ms"]["successful"],
    )
    p = ttft["percentiles"]
    return Result(p["p50"] / 1000, p["p99"] / 1000, ttft["mean"] / 1000, itl["mean"] / 1000)
