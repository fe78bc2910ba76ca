"""Results bundles for the advisor's tests, produced by the simulator on a virtual clock.

`simulate_bundle` runs a workload through the real scheduler and block pool with the cost
model's step times (as `kvscope run --simulate` would, minus HTTP and wall-clock time)
and writes what `kvscope run` writes: run.json (with the deployment facts), requests.parquet
(one row per request, with prompt fingerprints) and server.parquet (one sample per
virtual second, the exporter's canonical columns). A 2-minute run takes seconds.

Prompts are text so fingerprints are real: each request's text is its shared system part
(optionally behind a per-request timestamp, the near-identical case) plus its own user
words, about CHARS_PER_TOKEN characters per token. The engine sees token ids: requests of
one prefix group share the group's ids for the shared part unless `timestamped`, where
the differing leading span makes the prefix cache miss, as it would on a real server.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pandas as pd

from harness.bundle.deployment import BUNDLED, of_config
from harness.workload.fingerprint import record_columns
from reference_engine.clock import VirtualClock
from reference_engine.config import EngineConfig
from reference_engine.sampling_params import InvalidRequestError, SamplingParams
from reference_engine.sim.engine import SimSpec, build_sim_engine

T0 = 1_767_000_000.0
CHARS_PER_TOKEN = 5
WORDS = [f"w{i:03d}" for i in range(1000)]  # 4 characters + a space: one token each


@dataclass(frozen=True, slots=True)
class Req:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_group: int = -1
    prefix_tokens: int = 0


class _Tok:
    eos_token_ids: tuple[int, ...] = ()
    vocab_size = 1 << 17

    def encode(self, text: str) -> list[int]:
        raise ValueError("token ids only")

    def decode(self, ids: list[int]) -> str:
        return ""


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)) + " "


def prompt_text(req: Req, index: int, timestamped: bool) -> str:
    """~CHARS_PER_TOKEN characters per token; the shared part first, per-group seeded."""
    own = random.Random(7919 * index + 1)
    if req.prefix_group < 0 or req.prefix_tokens <= 0:
        return _words(own, req.prompt_tokens)
    shared = _words(random.Random(104_729 * (req.prefix_group + 1)), req.prefix_tokens)
    if timestamped:
        clock = f"{index % 24:02d}:{index * 7 % 60:02d}:{index * 13 % 60:02d}"
        stamp = f"Now: 2026-01-{1 + index % 28:02d}T{clock}Z. "
        shared = stamp + shared[len(stamp) :]
    return shared + _words(own, req.prompt_tokens - req.prefix_tokens)


def _ids(req: Req, index: int, timestamped: bool) -> list[int]:
    own = random.Random(index)
    shared: list[int] = []
    if req.prefix_group >= 0 and req.prefix_tokens > 0:
        g = random.Random(1_000_003 * (req.prefix_group + 1))
        shared = [g.randrange(1000, 60_000) for _ in range(req.prefix_tokens)]
        if timestamped:  # the first tokens differ per request: nothing after them can hit
            shared[:8] = [own.randrange(1000, 60_000) for _ in range(8)]
    return shared + [own.randrange(1000, 60_000) for _ in range(req.prompt_tokens - len(shared))]


def simulate_bundle(
    out: Path,
    trace: list[Req],
    spec: SimSpec | None,
    engine: EngineConfig,
    timestamped: bool = False,
    model: str = "tiny-random",
    fingerprints: bool = True,
    workload: str = "synthetic",
) -> Path:
    """Run `trace` on the simulator and write a bundle to `out` (see the module doc).
    `spec` None: a real-engine run's stand-in (SmolLM2 on an L4), recorded as the bundled
    engine (not the simulator)."""
    out.mkdir(parents=True, exist_ok=True)
    clock = VirtualClock()
    sim = build_sim_engine(
        spec or SimSpec("smollm2-135m", "l4"),
        engine,
        tokenizer=_Tok(),
        vocab=range(1000, 60_000),
        clock=clock,
    )
    eng, kv = sim.engine, sim.engine.kv
    pending = sorted(enumerate(trace), key=lambda p: (p[1].arrival_s, p[0]))
    rows: dict[str, dict] = {}
    samples: list[dict] = []
    finished = 0
    next_sample = 0.0

    def sample() -> None:
        st = eng.stats
        samples.append(
            {
                "time_unix": T0 + clock.t,
                "target": "http://127.0.0.1:8000",
                "model": model,
                "instance": "0",
                "kv_usage_ratio": kv.pool.usage(),
                "kv_capacity_blocks": float(sim.num_blocks),
                "kv_block_size_tokens": float(engine.block_size),
                "kv_capacity_tokens": float(sim.num_blocks * engine.block_size),
                "prefix_cache_queries_tokens": float(st.prefix_cache_queries),
                "prefix_cache_hits_tokens": float(st.prefix_cache_hits),
                "preemptions": float(eng.scheduler.num_preemptions),
                "requests_running": float(len(eng.scheduler.running)),
                "requests_waiting": float(len(eng.scheduler.waiting)),
                "prompt_tokens": float(st.prompt_tokens),
                "generation_tokens": float(st.generation_tokens),
                "requests_finished": float(finished),
                "up": True,
            }
        )

    while pending or eng.has_unfinished():
        while pending and pending[0][1].arrival_s <= clock.t:
            i, req = pending.pop(0)
            rid = f"r{i}"
            text = prompt_text(req, i, timestamped)
            row = {
                "request_id": rid,
                "worker_id": "w0",
                "workload": workload,
                "endpoint": "completions",
                "send_time_unix": T0 + req.arrival_s,
                "prompt_tokens": req.prompt_tokens,
                "output_tokens": 0,
                "target_prompt_tokens": req.prompt_tokens,
                "target_output_tokens": req.output_tokens,
                "itl_s": [],
                "ok": False,
                "status_code": 200,
                "usage_source": "server",
                "phase": "measure",
                "n": 1,
                "server_num_preemptions": 0,
                "cached_tokens": 0,
                "_last": None,
            }
            if fingerprints:
                row.update(record_columns({"prompt": text}))
            try:
                eng.add_request(
                    _ids(req, i, timestamped),
                    SamplingParams(max_tokens=req.output_tokens, ignore_eos=True),
                    request_id=rid,
                    arrival_time=req.arrival_s,
                )
            except InvalidRequestError:
                row.update(
                    status_code=400, error_class="http_4xx", ok=False, prompt_tokens=None, output_tokens=None
                )
            rows[rid] = row
        if not eng.has_unfinished():
            clock.advance_to(pending[0][1].arrival_s)
            continue
        for o in eng.step():
            row = rows.get(o.request.group_id)
            if row is None:
                continue
            t = clock.t
            if row["_last"] is None:
                row["ttft_s"] = t - (row["send_time_unix"] - T0)
            else:
                row["itl_s"].append(t - row["_last"])
            row["_last"] = t
            row["output_tokens"] += len(o.new_token_ids)
            row["server_num_preemptions"] = max(row["server_num_preemptions"], o.request.num_preemptions)
            row["cached_tokens"] = max(row["cached_tokens"], o.request.num_cached_tokens)
            if o.finished:
                row.update(ok=True, e2e_s=t - (row["send_time_unix"] - T0), finish_reason="length")
                finished += 1
        while next_sample <= clock.t:  # the exporter sees the engine between steps
            sample()
            next_sample += 1.0
    sample()
    for row in rows.values():
        row.pop("_last")
    pd.DataFrame(list(rows.values())).to_parquet(out / "requests.parquet")
    pd.DataFrame(samples).to_parquet(out / "server.parquet")
    deployment = of_config(
        "bundled simulator" if spec else "bundled engine",
        asdict(replace(engine, model=model)),
        asdict(spec) if spec else None,
        BUNDLED,
    )
    run = {"workload": workload, "target": None, "model": model, "deployment": deployment.to_json()}
    (out / "run.json").write_text(json.dumps(run, indent=2))
    (out / "summary.json").write_text(json.dumps({"requests": len(rows)}))
    return out


def long_requests(n: int, gap_s: float, seed: int = 0, prompt=(1500, 2500), output=(200, 400)) -> list[Req]:
    rng = random.Random(seed)
    return [Req(i * gap_s, rng.randint(*prompt), rng.randint(*output)) for i in range(n)]


def shared_prefix_requests(
    n: int,
    gap_s: float,
    prefix_tokens: int,
    suffix=(40, 120),
    output=(20, 60),
    groups: int = 1,
    seed: int = 0,
) -> list[Req]:
    rng = random.Random(seed)
    return [
        Req(i * gap_s, prefix_tokens + rng.randint(*suffix), rng.randint(*output), i % groups, prefix_tokens)
        for i in range(n)
    ]
