"""Synthetic results bundles for analysis and report tests (the real ones come from `kvscope run`).

`make_bundle(dir, ...)` writes run.json, requests.parquet and server.parquet with the
harness's column names: requests arrive over `duration_s`; KV usage ramps from 0.2 to ~1.0;
from `preempt_at_s` on the preemption counter climbs and TTFT grows; `overhead_s` is added
to the client's TTFT on top of the server's (to imitate a saturated client).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

T0 = 1_750_000_000.0


@dataclass(frozen=True, slots=True)
class Spec:
    n_requests: int = 200
    duration_s: float = 40.0
    seed: int = 0
    preempt_at_s: float | None = 20.0
    overhead_s: float = 0.002
    overhead_jitter_s: float = 0.001
    server_timings: bool = True
    histograms: bool = False
    model: str = "tiny-random"
    target: str = "http://127.0.0.1:8000"
    error_every: int = 0  # every k-th request fails with http_5xx (0: none)
    schedule_lag_s: float | None = None  # open loop: lag per request
    counter_reset_at_s: float | None = None
    run_extra: dict | None = None


def make_frames(spec: Spec) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(spec.seed)
    send = T0 + np.sort(rng.uniform(0, spec.duration_s, spec.n_requests))
    rel = send - T0
    late = (rel >= spec.preempt_at_s) if spec.preempt_at_s is not None else np.zeros(len(rel), bool)
    server_ttft = rng.gamma(4.0, 0.02, len(rel)) + np.where(late, rng.gamma(4.0, 0.2, len(rel)), 0.0)
    ttft = server_ttft + spec.overhead_s + rng.uniform(0, spec.overhead_jitter_s, len(rel))
    out_tokens = rng.integers(8, 64, len(rel))
    itl = [list(rng.gamma(5.0, 0.004, k - 1)) for k in out_tokens]
    e2e = ttft + np.array([sum(x) for x in itl])
    ok = np.ones(len(rel), bool)
    if spec.error_every:
        ok[:: spec.error_every] = False
    rows = []
    for i in range(len(rel)):
        good = bool(ok[i])
        rows.append(
            {
                "request_id": f"r{i}",
                "worker_id": "w0",
                "workload": "chat",
                "endpoint": "chat",
                "send_time_unix": float(send[i]),
                "scheduled_time_unix": float(send[i] - spec.schedule_lag_s)
                if spec.schedule_lag_s is not None
                else np.nan,
                "schedule_lag_s": spec.schedule_lag_s if spec.schedule_lag_s is not None else np.nan,
                "ttft_s": float(ttft[i]) if good else np.nan,
                "e2e_s": float(e2e[i]) if good else 0.01,
                "itl_s": itl[i] if good else [],
                "num_chunks": int(out_tokens[i]) if good else 0,
                "prompt_tokens": int(100 + i % 50) if good else None,
                "output_tokens": int(out_tokens[i]) if good else None,
                "usage_source": "server" if good else "none",
                "cached_tokens": 0,
                "target_prompt_tokens": 100,
                "target_output_tokens": 64,
                "finish_reason": "length" if good else None,
                "status_code": 200 if good else 500,
                "error_class": None if good else "http_5xx",
                "ok": good,
                "server_queue_time_s": float(server_ttft[i] * 0.5)
                if spec.server_timings and good
                else np.nan,
                "server_prefill_time_s": np.nan,
                "server_ttft_s": float(server_ttft[i]) if spec.server_timings and good else np.nan,
                "server_decode_time_s": np.nan,
                "server_e2e_s": float(e2e[i] - spec.overhead_s) if spec.server_timings and good else np.nan,
                "server_num_preemptions": (1 if late[i] else 0) if spec.server_timings else None,
                "server_cached_prompt_tokens": 0,
                "error_message": None if good else "boom <b>",
                "phase": "measure",
                "n": 1,
                "prefix_id": None,
            }
        )
    requests = pd.DataFrame(rows)
    times = T0 - 1.0 + np.arange(0.0, spec.duration_s + 4.0, 1.0)
    t_rel = times - T0
    usage = np.clip(0.2 + 0.8 * t_rel / spec.duration_s, 0.0, 1.0)
    pre = (
        np.where(
            t_rel >= (spec.preempt_at_s if spec.preempt_at_s is not None else np.inf),
            np.floor(t_rel - (spec.preempt_at_s or 0)) * 2 + 2,
            0.0,
        )
        + 5.0
    )  # starts at 5: not from zero
    queries = np.cumsum(np.full(len(times), 1000.0))
    hits = np.cumsum(np.full(len(times), 250.0))
    if spec.counter_reset_at_s is not None:
        k = t_rel >= spec.counter_reset_at_s
        base = np.argmax(k)
        for arr in (pre, queries, hits):
            arr[k] = arr[k] - arr[base] + (arr[base] - arr[base - 1])
    srv = pd.DataFrame(
        {
            "time_unix": times,
            "target": spec.target,
            "model": spec.model,
            "instance": "0",
            "up": True,
            "kv_usage_ratio": usage,
            "kv_capacity_blocks": 100.0,
            "kv_block_size_tokens": 16.0,
            "kv_capacity_tokens": 1600.0,
            "prefix_cache_queries_tokens": queries,
            "prefix_cache_hits_tokens": hits,
            "preemptions": pre,
            "requests_running": np.minimum(16, 1 + t_rel.clip(0)),
            "requests_waiting": (t_rel - 20).clip(0),
            "prompt_tokens": np.cumsum(np.full(len(times), 1000.0)),
            "generation_tokens": np.cumsum(np.full(len(times), 300.0)),
            "requests_finished": np.cumsum(np.full(len(times), 5.0)),
        }
    )
    if spec.histograms:
        bounds = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, "+Inf"]
        fin = np.array([b for b in bounds if b != "+Inf"], dtype=float)
        hist = []
        for t in times:
            seen = server_ttft[send <= t]
            counts = [int((seen <= b).sum()) for b in fin] + [len(seen)]
            hist.append(
                json.dumps(
                    {
                        "time_to_first_token_seconds": {
                            "bounds": bounds,
                            "counts": counts,
                            "sum": float(seen.sum()),
                            "count": len(seen),
                        }
                    }
                )
            )
        srv["histograms"] = hist
    run = {
        "workload": "chat",
        "model": spec.model,
        "target": spec.target,
        "start": T0,
        "end": T0 + spec.duration_s,
        "config": {"users": 8},
        **(spec.run_extra or {}),
    }
    return run, requests, srv


def make_bundle(directory: str | Path, spec: Spec | None = None) -> Path:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    run, requests, srv = make_frames(spec or Spec())
    (d / "run.json").write_text(json.dumps(run, indent=2), encoding="utf-8")
    requests.to_parquet(d / "requests.parquet", index=False)
    srv.to_parquet(d / "server.parquet", index=False)
    return d
