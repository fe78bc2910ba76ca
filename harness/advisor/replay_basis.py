"""What the replay of a run rests on, and what it truly lacks.

A replay needs the pool (blocks and block size), how the server times a step, the run's own
requests, and the scheduler settings that could bind. For a --target server:
- the pool: what it publishes (vLLM's `cache_config_info`: num_gpu_blocks, block_size);
- the step times: fitted to the server's per-request timings (its OTLP spans, llama.cpp's
  `timings`), so no catalogue model or GPU is needed; without them the catalogue's cost model
  of a stated model and GPU (then those are needed);
- prefix caching and the allocator: stated (vLLM's pool is paged; a hit proves caching on);
- max_num_seqs and max_num_batched_tokens, which vLLM does not publish: only needed when they
  could bind. kvscope's client never has more requests in flight than the run's users, so a
  run of at most SMALLEST_MAX_NUM_SEQS users never meets vLLM's smallest default (128 on CPU;
  256 or 1024 on GPUs) and is replayed with max_num_seqs = its users; a step never computes
  more than every user's prompt at once, so a run whose users x longest prompt is at most
  SMALLEST_BATCHED_TOKENS never meets vLLM's smallest default budget (2048, the API server on
  CPUs and on GPUs under 70 GiB) and is replayed with that budget. A server set lower than its
  defaults must say so (`--deployment max-num-seqs=N`); the assumption is written down.
The catalogue model and GPU are needed only for changes across deployments (another GPU,
another tensor parallelism), which the verdicts only propose when they are stated.

`used` says, in words, which data the replay used; each verdict's replay carries it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.advisor.deployment import Deployment
from harness.advisor.step_fit import NEED as TIMING_COLUMNS

SMALLEST_MAX_NUM_SEQS = 128
SMALLEST_BATCHED_TOKENS = 2048
POOL = ("num_blocks", "block_size")
CATALOGUE = ("model", "gpu", "tensor_parallel_size")
STATED = ("enable_prefix_caching", "allocator")


@dataclass(frozen=True, slots=True)
class ReplayBasis:
    missing: list[str] = field(default_factory=list)  # facts the replay needs and no one stated
    assumed: dict[str, Any] = field(default_factory=dict)  # unstated settings that cannot bind
    used: dict[str, str] = field(default_factory=dict)


def has_server_timings(requests: pd.DataFrame) -> bool:
    return all(c in requests.columns and requests[c].notna().any() for c in TIMING_COLUMNS)


def _timing_source(requests: pd.DataFrame) -> str:
    sources = requests.get("server_timing_source", pd.Series(dtype=object)).dropna()
    return ", ".join(sorted(set(map(str, sources)))) or "the server"


def replay_basis(dep: Deployment, requests: pd.DataFrame, run: dict[str, Any]) -> ReplayBasis:
    """See the module doc."""
    timed = has_server_timings(requests)
    bs = dep.engine.block_size
    done = int(requests["ok"].fillna(False).astype(bool).sum()) if "ok" in requests else len(requests)
    used = {
        "requests": f"the run's {done} completed requests (lengths from the server's usage, shared "
        "prefixes from the prompt fingerprints)",
        "pool": (
            f"{dep.num_blocks} blocks of {bs} tokens, "
            + ("the engine's configuration" if dep.bundled else "as the server published them (its metrics)")
        )
        if dep.num_blocks
        else "unknown",
        "step_times": f"fitted to the per-request timings from {_timing_source(requests)}"
        if timed
        else "the catalogue's cost model",
    }
    if dep.bundled:
        return ReplayBasis(used=used)
    missing = dep.unknown(POOL) + dep.unknown(STATED) + ([] if timed else dep.unknown(CATALOGUE))
    assumed: dict[str, Any] = {}
    config = run.get("config") if isinstance(run.get("config"), dict) else {}
    users = config.get("users") if isinstance(config.get("users"), int) else None
    if "max_num_seqs" in dep.unstated:
        if users is not None and users <= SMALLEST_MAX_NUM_SEQS:
            assumed["max_num_seqs"] = users
        else:
            missing.append("max_num_seqs")
    if "max_num_batched_tokens" in dep.unstated:
        longest = pd.to_numeric(requests.get("prompt_tokens"), errors="coerce").max()
        if users is not None and longest == longest and users * longest <= SMALLEST_BATCHED_TOKENS:
            assumed["max_num_batched_tokens"] = SMALLEST_BATCHED_TOKENS
        else:
            missing.append("max_num_batched_tokens")
    if assumed:
        used["assumed"] = (
            "not published by the server and unable to bind in this run, so set to: "
            + ", ".join(f"{k}={v}" for k, v in assumed.items())
            + f" (at most {users} requests in flight; state --deployment if the server was set lower)"
        )
    return ReplayBasis(missing, assumed, used)
