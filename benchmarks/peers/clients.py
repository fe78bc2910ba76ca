"""The clients `benchmarks/peer_clients.py` compares: how each is started for N streams of
the same request, and how its own per-request results are read back.

Each gives TTFT p50/p99, its mean TTFT and the per-request mean ITL (a request's gaps
between tokens over its tokens after the first, then the mean over requests), from its own
records or its own export. AIPerf and GuideLLM run from the venvs `make bench-peers` makes
(scripts/install_peers.sh); without them their rows are left out and the table says so.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.peers import external
from benchmarks.peers.result import Result
from harness.run.commands import kvscope_command

ROOT = Path(__file__).resolve().parents[2]
PROMPT_WORDS = 128
MAX_TOKENS = 128


Command = Callable[[str, str, int, float, Path], tuple[list[str], dict[str, str]]]


@dataclass(frozen=True, slots=True)
class Client:
    name: str
    command: Command  # (url, model, streams, seconds, work dir) -> (argv, extra environment)
    parse: Callable[[Path], Result]
    missing: Callable[[], str | None] = lambda: None
    not_client: tuple[str, ...] = field(default_factory=tuple)  # command-line marks of non-client children
    cwd: Path = ROOT  # where it runs (another checkout's kvscope runs from that checkout)


def _records(path: Path) -> Result:
    """One JSON line per request (the two own-design clients)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    ok = [r for r in rows if r["ok"] and r["ttft_s"] is not None]
    itl = [sum(r["itl_s"]) / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] > 1 and r["itl_s"]]
    return Result.of(np.array([r["ttft_s"] for r in ok]), np.array(itl))


def _kvscope(url: str, model: str, streams: int, seconds: float, work: Path):
    return kvscope_command(
        "run", "--quiet", "--target", url, "--model", model, "--workload", "long_context",
        "--endpoint", "completions", "--users", str(streams), "--spawn-rate", str(streams),
        "--duration", f"{seconds:g}s", "--prompt-tokens", str(PROMPT_WORDS),
        "--output-tokens", str(MAX_TOKENS),
        "--length-spread", "0", "--no-calibrate", "--no-advise", "--max-error-rate", "100%",
        "--out", str(work / "bundle"),
    ), {}  # fmt: skip


def _kvscope_result(work: Path) -> Result:
    from harness.analysis.latency import per_request_itl
    from harness.results import load

    m = load(work / "bundle").measured
    ok = m[m["ok"]]
    return Result.of(ok["ttft_s"].to_numpy(float), per_request_itl(ok).to_numpy(float))


def _locust(url: str, model: str, streams: int, seconds: float, work: Path):
    argv = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "benchmarks" / "peers" / "locust_readline.py"),
        "--headless", "--host", url, "-u", str(streams), "-r", str(streams), "-t", f"{seconds:g}s",
        "--only-summary",
    ]  # fmt: skip
    env = {
        "PEER_RECORDS": str(work / "records.jsonl"),
        "PEER_MODEL": model,
        "PEER_PROMPT_WORDS": str(PROMPT_WORDS),
        "PEER_MAX_TOKENS": str(MAX_TOKENS),
        "PYTHONPATH": str(ROOT),
    }
    return argv, env


def own_client(module: str) -> Command:
    """The command of a client written here (`benchmarks.peers.<module>`, `request.client_args`)."""

    def command(url: str, model: str, streams: int, seconds: float, work: Path):
        return [
            sys.executable, "-m", f"benchmarks.peers.{module}", "--url", url, "--model", model,
            "--streams", str(streams), "--duration", f"{seconds:g}", "--prompt-words", str(PROMPT_WORDS),
            "--max-tokens", str(MAX_TOKENS), "--out", str(work / "records.jsonl"),
        ], {"PYTHONPATH": str(ROOT)}  # fmt: skip

    return command


def kvscope_from(checkout: Path) -> Client:
    """kvscope as another checkout of it has it (an earlier commit, for a before/after row in
    the same run): its own `harness` and `loadtests`, this environment's packages."""

    def command(url: str, model: str, streams: int, seconds: float, work: Path):
        argv, _ = _kvscope(url, model, streams, seconds, work)
        return argv, {"PYTHONPATH": str(checkout)}

    return Client(
        "kvscope-baseline", command, _kvscope_result, not_client=("harness.cli exporter",), cwd=checkout
    )


CLIENTS: dict[str, Client] = {
    c.name: c
    for c in (
        Client("kvscope", _kvscope, _kvscope_result, not_client=("harness.cli exporter",)),
        Client("bare-readline", own_client("bare_readline"), lambda w: _records(w / "records.jsonl")),
        Client("locust-readline", _locust, lambda w: _records(w / "records.jsonl")),
        Client("asyncio-aiohttp", own_client("aiohttp_client"), lambda w: _records(w / "records.jsonl")),
        Client("aiperf", external.aiperf_command, external.aiperf_result, external.missing("aiperf")),
        Client("guidellm", external.guidellm_command, external.guidellm_result, external.missing("guidellm")),
    )
}
