"""The multi-turn workload against real servers: the prefix hit ratio kvscope computes from
its own records (the cached tokens each response reported, over the prompt tokens) is the
one the server's counters give over the run. Without calibration, so the counters read
before and after the run cover exactly the run's requests.

One parametrisation per server: llama.cpp (`tests/support/llama_server`: 4 slots, SmolLM2),
whose `cache_n` and `prompt_tokens_details.cached_tokens` both land in `cached_tokens`.
Another server joins with its start-up (a context manager yielding `.url` and `.metrics()`),
the flags it needs to report cached tokens per response, and its (cached, prompt) counters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pytest

from harness.results import load
from tests.integration.test_llamacpp_run import prefix_counters
from tests.support.llama_server import llama_server
from tests.support.servers import kvscope_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@dataclass(frozen=True, slots=True)
class RealServer:
    start: Callable[..., Any]  # (tmp_path, *flags) -> context manager of a server
    flags: tuple[str, ...]
    counters: Callable[[str], tuple[float, float]]  # /metrics text -> (cached, prompt) tokens so far


def _llamacpp_counters(metrics: str) -> tuple[float, float]:
    cached, computed = prefix_counters(metrics)  # llama.cpp counts computed tokens apart
    return cached, cached + computed


SERVERS = {"llamacpp": RealServer(llama_server, (), _llamacpp_counters)}


@pytest.fixture(scope="module", params=sorted(SERVERS))
def server_run(request, tmp_path_factory):
    spec = SERVERS[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    with spec.start(tmp, *spec.flags) as server:
        before = spec.counters(server.metrics())
        rc, log, _ = kvscope_run(
            "--target", server.url, "--workload", "multi_turn", "--users", "4", "--sessions", "12",
            "--turns", "4", "--user-tokens", "24", "--answer-tokens", "12", "--system-tokens", "64",
            "--turn-think-time", "0", "--no-calibrate", "--duration", "5m", "--out", str(tmp / "b"),
            "--no-advise", timeout_s=500,
        )  # fmt: skip
        assert rc == 0, log
        after = spec.counters(server.metrics())
    return load(tmp / "b"), before, after


def test_the_clients_hit_ratio_is_the_servers(server_run) -> None:
    bundle, (cached0, prompt0), (cached1, prompt1) = server_run
    requests = bundle.requests
    assert requests["ok"].all() and (requests["phase"] == "measure").all() and len(requests) == 48
    cached = pd.to_numeric(requests["cached_tokens"]).sum()
    prompt = pd.to_numeric(requests["prompt_tokens"]).sum()
    assert cached > 0 and requests["cached_tokens"].notna().all()
    assert cached / prompt == pytest.approx((cached1 - cached0) / (prompt1 - prompt0), abs=1e-9)
    print(f"hit ratio: client {cached / prompt:.4f}, server {(cached1 - cached0) / (prompt1 - prompt0):.4f}")


def test_the_sessions_keep_their_history_on_the_server(server_run) -> None:
    sessions = server_run[0].summary["sessions"]
    assert sessions["sessions"] == 12 and sessions["ends"]["completed"] == 12
    assert sessions["history_carried"] == 1.0 and sessions["history_cached"] >= 0.9
    hit = [t["hit_ratio"] for t in sessions["by_turn"]]
    assert hit[3] > hit[0], hit
