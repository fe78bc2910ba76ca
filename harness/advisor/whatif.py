"""What-if replays: the run's own requests, replayed on the simulator (real scheduler and
block pool, modelled time) as the run was set up and with one change.

The trace is every completed request: arrival = its send time from the first send,
prompt and output tokens from the server's usage, and its shared-prefix group from the
prompt fingerprints (`prefixes`; the server's cached-token counts set a floor under each
group's shared length, see `WorkloadEvidence.prefix_groups`), so a shared system prompt
hits the cache in the replay as it did in the run. A session's turns are replayed as one
conversation (`conversations`): each prompt carries the previous turn's prompt and answer,
after a stem shared with the other conversations, so a turn finds its history cached
exactly when the replayed pool kept it between the turns. A closed-loop run is replayed closed-loop
(`chains`): each user's first request at its send time, each later one its recorded gap after
the user's previous request finished in the replay, so a replayed server slower or faster
than the run sees the load its users would have sent it. An open-loop run (a rate, a trace)
is replayed at its recorded send times.

Time axis. When the bundle has the server's per-request timings, the step time is fitted to
them (`step_fit`: overhead, per decoding sequence, per prefilled token and its context, and
the server's speed drifting over the run, `step_drift`), so the replay runs in the run's own
seconds on the server that ran (a --target's replay uses what the run measured:
`replay_basis`); a change of GPU or tensor parallelism
scales that fit by the catalogue cost model's ratio between the two deployments. Without
such timings: a --simulate run (or a --target run described with a catalogue GPU) uses the
catalogue's cost model of that deployment; a run on the real bundled engine uses the cost
model of SmolLM2-135M on an L4 with arrivals stretched by the ratio of its modelled decode
step to the run's median inter-token gap (times divided back into the run's seconds; `twin`).
The time axis says which.

Every what-if is compared with the replay of the unchanged configuration, and that
baseline is first held against the run itself (`fidelity`): preemptions and TTFT p99
within 25%. A change is verified only then, and when its replay completes at least as many
requests, rejects no more, and either has fewer preemptions (TTFT p99 not VERIFY_TTFT_GAIN
worse) or a TTFT p99 at least VERIFY_TTFT_GAIN lower with output throughput not that much
lower. Preemptions may rise with more memory (more requests admitted, more of them growing
at once) while every request is served sooner: that is a gain, and the reason says so. A
gain over a baseline that misses the run is "indicative", with the baseline's error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np
import pandas as pd

from harness.advisor.capacity import base_blocks
from harness.advisor.chains import Chains, find_chains
from harness.advisor.conversations import replay_prefix
from harness.advisor.deployment import Deployment
from harness.advisor.evidence import WorkloadEvidence, completed
from harness.advisor.fidelity import Fidelity, Measured, judge_fidelity, measured_run
from harness.advisor.replay_basis import replay_basis
from harness.advisor.run_inputs import RunInputs
from harness.advisor.step_drift import OnRunClock
from harness.advisor.step_fit import StepFit, Transferred, fit_steps
from harness.advisor.twin import REAL_ENGINE_GPU, scaled_twin, stand_in
from harness.bundle.finding import Finding
from reference_engine.catalogue import get_gpu, get_model
from reference_engine.config import EngineConfig
from reference_engine.sim.cost_model import CostModel
from reference_engine.sim.replay import ReplayResult, TraceRequest, replay_trace
from reference_engine.sim.spec import SimSpec

VERIFY_TTFT_GAIN = 0.05
UNFINISHED_ERRORS = ("timeout", "stream_error")
MAX_REPLAY_REQUESTS = 5_000  # bounds the advisor's time: every what-if replays the whole trace


@dataclass(frozen=True, slots=True)
class Change:
    """One what-if; None fields keep the run's value."""

    label: str
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    num_blocks: int | None = None  # per replica, null block included
    gpu: str | None = None
    tp: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    replicas: int = 1
    prefix_identical: bool = False


@dataclass(frozen=True, slots=True)
class ReplayMetrics:
    requests: int
    completed: int
    rejected: int
    preemptions: int
    preempted_requests: int
    duration_s: float
    output_tokens_per_s: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    e2e_p99_s: float | None
    peak_kv_usage: float
    prefix_hit_ratio: float | None
    num_blocks: int
    max_running: int


@dataclass(frozen=True, slots=True)
class Comparison:
    change: Change
    baseline: ReplayMetrics
    changed: ReplayMetrics
    shown: bool  # the replay shows the gain over its baseline (whether that baseline is the run: `fidelity`)
    why: Finding
    time_axis: str
    fidelity: Fidelity | None = None  # the baseline against the run; None: not checked
    basis: dict[str, str] = field(default_factory=dict)  # the data the replay used

    def to_dict(self) -> dict:
        return {
            "change": {k: v for k, v in asdict(self.change).items() if v not in (None, False)},
            "baseline": asdict(self.baseline),
            "changed": asdict(self.changed),
            "shown": self.shown,
            "why": self.why.to_dict(),
            "time_axis": self.time_axis,
            "baseline_fidelity": None if self.fidelity is None else self.fidelity.to_dict(),
            "basis": self.basis,
        }


@dataclass(slots=True)
class Replayer:
    """Replays one run's trace; the baseline is computed once. `scale` stretches arrivals
    (1.0 for a simulated deployment); reported times are divided by it."""

    deployment: Deployment
    trace: list[TraceRequest]
    near_trace: list[TraceRequest]
    spec: SimSpec
    config: EngineConfig
    scale: float
    time_axis: str
    excluded: int
    step_fit: StepFit | None = None  # the run's own step times; None: the catalogue's cost model
    measured: Measured | None = None  # what the run measured, for the baseline's fidelity
    t0_unix: float = 0.0  # the run's time of the trace's 0 (its first send)
    basis: dict[str, str] = field(default_factory=dict)  # the data the replay used, in words
    _baseline: ReplayMetrics | None = field(default=None)

    def baseline(self) -> ReplayMetrics:
        if self._baseline is None:
            self._baseline = self.run(Change("as run"))
        return self._baseline

    def fidelity(self) -> Fidelity | None:
        """The unchanged configuration's replay against the run (None when nothing measured)."""
        if self.measured is None:
            return None
        base = self.baseline()
        return judge_fidelity(self.measured, base.preemptions, base.ttft_p99_s, base.prefix_hit_ratio)

    def _step_cost(self, spec: SimSpec, config: EngineConfig):
        """The fit, carried over to other hardware by the catalogue's ratio; None: catalogue."""
        if self.step_fit is None:
            return None
        if (spec.gpu, spec.tensor_parallel_size) == (self.spec.gpu, self.spec.tensor_parallel_size):
            fit = self.step_fit
            if fit.drift is None and not fit.stalls:
                return fit
            return OnRunClock(fit, fit.drift, self.t0_unix, self.scale, fit.stalls)
        model = get_model(spec.model)  # the KV dtype is the same on both sides: left at auto
        return Transferred(
            self.step_fit,
            CostModel(model, get_gpu(self.spec.gpu), self.spec.tensor_parallel_size, spec.weight_dtype),
            CostModel(model, get_gpu(spec.gpu), spec.tensor_parallel_size, spec.weight_dtype),
        )

    def run(self, change: Change) -> ReplayMetrics:
        spec = replace(
            self.spec,
            gpu=change.gpu or self.spec.gpu,
            tensor_parallel_size=change.tp or self.spec.tensor_parallel_size,
            gpu_memory_utilization=change.gpu_memory_utilization or self.spec.gpu_memory_utilization,
        )
        config = replace(
            self.config,
            kv_cache_dtype=change.kv_cache_dtype or self.config.kv_cache_dtype,
            max_model_len=change.max_model_len or self.config.max_model_len,
            num_blocks=change.num_blocks or self.config.num_blocks,
            max_num_seqs=change.max_num_seqs or self.config.max_num_seqs,
        )
        trace = self.near_trace if change.prefix_identical else self.trace
        parts = (
            [trace[r :: change.replicas] for r in range(change.replicas)] if change.replicas > 1 else [trace]
        )
        cost = self._step_cost(spec, config)
        results = [replay_trace(part, spec, config, step_cost=cost) for part in parts if part]
        return _metrics(results, len(trace), self.scale)

    def compare(self, change: Change) -> Comparison:
        base, changed = self.baseline(), self.run(change)
        ok, why = judge(base, changed)
        return Comparison(change, base, changed, ok, why, self.time_axis, self.fidelity(), self.basis)


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _metrics(results: list[ReplayResult], requests: int, scale: float) -> ReplayMetrics:
    records = [r for res in results for r in res.records]
    ttft = [r.ttft_s / scale for r in records if r.ttft_s is not None]
    e2e = [(r.finished_s - r.arrival_s) / scale for r in records if r.finished_s is not None]
    duration = max((res.duration_s for res in results), default=0.0) / scale
    queries = sum(res.prefix_cache_queries for res in results)
    out_tokens = sum(res.output_tokens for res in results)
    return ReplayMetrics(
        requests=requests,
        completed=len(records),
        rejected=sum(res.rejected for res in results),
        preemptions=sum(res.num_preemptions for res in results),
        preempted_requests=sum(1 for r in records if r.num_preemptions > 0),
        duration_s=round(duration, 3),
        output_tokens_per_s=round(out_tokens / duration, 2) if duration else 0.0,
        ttft_p50_s=_pct(ttft, 50),
        ttft_p99_s=_pct(ttft, 99),
        e2e_p99_s=_pct(e2e, 99),
        peak_kv_usage=max((res.peak_kv_usage for res in results), default=0.0),
        prefix_hit_ratio=sum(res.prefix_cache_hits for res in results) / queries if queries else None,
        num_blocks=max((res.num_blocks for res in results), default=0),
        max_running=max((res.max_running for res in results), default=0),
    )


def judge(base: ReplayMetrics, changed: ReplayMetrics) -> tuple[bool, Finding]:
    """(shown, a short reason) — see the module doc for the rule. The numbers themselves
    are in the two ReplayMetrics, so the reason does not repeat them."""
    if changed.completed < base.completed or changed.rejected > base.rejected:
        return False, Finding(
            "completes_fewer",
            f"the change completes {changed.completed} requests (as run: {base.completed}) and "
            f"rejects {changed.rejected} (as run: {base.rejected})",
        )
    b, c = base.ttft_p99_s, changed.ttft_p99_s
    ttft_better = bool(b) and c is not None and c <= (1 - VERIFY_TTFT_GAIN) * b
    ttft_worse = bool(b) and c is not None and c > (1 + VERIFY_TTFT_GAIN) * b
    slower = changed.output_tokens_per_s < (1 - VERIFY_TTFT_GAIN) * base.output_tokens_per_s
    if changed.preemptions < base.preemptions and not ttft_worse:
        return True, Finding("fewer_preemptions", "fewer preemptions")
    if ttft_better and not slower:
        more = changed.preemptions > base.preemptions
        lower = f"TTFT p99 {1 - c / b:.0%} lower"  # type: ignore[operator]
        return True, Finding("lower_ttft", lower + (" (though preempting more)" if more else ""))
    if ttft_better or changed.preemptions < base.preemptions:
        return False, Finding(
            "mixed_gain", "mixed: a gain in one of preemptions, TTFT p99 and throughput, a loss in another"
        )
    return False, Finding("no_gain", "no measurable gain (no fewer preemptions, TTFT p99 not 5% lower)")


def build_trace(
    done: pd.DataFrame,
    evidence: WorkloadEvidence,
    near: bool = False,
    scale: float = 1.0,
    t0: float | None = None,
    chains: Chains | None = None,
) -> list[TraceRequest]:
    """One TraceRequest per row (see the module doc); arrivals count from `t0` (default: the
    first send in `done`); `chains`: each row's closed-loop user and gap, in row order."""
    if t0 is None:
        t0 = float(done["send_time_unix"].min()) if len(done) else 0.0
    groups = evidence.prefix_groups(done, near) if evidence.sharing else [(-1, 0)] * len(done)
    n = done["n"].fillna(1).astype(int).tolist() if "n" in done.columns else [1] * len(done)
    chain = chains.chain.tolist() if chains is not None else [-1] * len(done)
    after = chains.after_s.tolist() if chains is not None else [0.0] * len(done)
    turns = evidence.turns or (None,) * len(done)
    prompts = done["prompt_tokens"].astype(int)
    prefixes = [asdict(replay_prefix(turn, g, p)) for turn, g, p in zip(turns, groups, prompts)]
    return [
        TraceRequest((float(t) - t0) * scale, int(p), int(o), max(1, k), chain=c, after_s=a * scale, **x)
        for t, p, o, k, c, a, x in zip(
            done["send_time_unix"],
            done["prompt_tokens"],
            done["output_tokens"],
            n,
            chain,
            after,
            prefixes,
        )
    ]


def unfinished(requests: pd.DataFrame) -> pd.DataFrame:
    """Requests the server received but the client saw fail mid-way (timeout, broken
    stream): they loaded the cache too, so they are replayed with their target lengths."""
    if "error_class" not in requests.columns or "target_output_tokens" not in requests.columns:
        return requests.iloc[0:0]
    prompt = pd.to_numeric(requests["prompt_tokens"], errors="coerce")
    if "target_prompt_tokens" in requests.columns:
        prompt = prompt.fillna(pd.to_numeric(requests["target_prompt_tokens"], errors="coerce"))
    output = pd.to_numeric(requests["target_output_tokens"], errors="coerce")
    rows = requests[
        requests["error_class"].isin(UNFINISHED_ERRORS) & prompt.notna() & output.notna() & (output > 0)
    ]
    return rows.assign(prompt_tokens=prompt[rows.index], output_tokens=output[rows.index]).reset_index(
        drop=True
    )


def make_replayer(
    inputs: RunInputs,
    evidence: WorkloadEvidence,
    mean_running: float | None = None,
    preemptions: float | None = None,
) -> Replayer:
    """The replayer for a run (see the module doc for the time axis); `preemptions` is the
    server's count over the run, for the baseline's fidelity. Raises ValueError when the run
    cannot be replayed: its pool size is unknown, or the engine refuses the setup."""
    dep = inputs.deployment
    done = completed(inputs.requests)
    basis = replay_basis(dep, inputs.requests, inputs.run)
    budget = basis.assumed.get("max_num_batched_tokens", dep.known("max_num_batched_tokens"))
    fit = fit_steps(inputs.requests, budget)
    blocks = base_blocks(dep)
    if blocks is None:
        raise ValueError("the run's KV pool size is unknown (no kv_capacity_blocks samples, no engine flags)")
    config = replace(dep.engine, num_blocks=blocks, kv_cache_memory=None, **basis.assumed)
    if dep.gpu_sized:
        spec = SimSpec(
            dep.model or "", dep.gpu or "", dep.tp, dep.gpu_memory_utilization or 0.9, dep.weight_dtype
        )
        config = replace(config, max_model_len=dep.max_model_len)
        scale, axis = 1.0, f"modelled: {dep.model} on {dep.tp} x {dep.gpu} (the simulator's cost model)"
    else:  # the real bundled engine or a --target: a catalogue twin sizes nothing (the pool is the run's)
        twin = stand_in(dep)
        spec = SimSpec(twin.name, REAL_ENGINE_GPU, 1, 0.9, "auto")
        limit = min(dep.max_model_len or twin.max_context, twin.max_context)
        config = replace(config, max_model_len=limit, kv_cache_dtype="auto")
        scale, axis = (1.0, "") if fit is not None else scaled_twin(done, twin, limit, blocks, mean_running)
    if fit is not None:
        axis = (
            f"the run's own seconds: {blocks:,}-block pool, step times fitted to the server's per-request "
            f"timings ({fit.describe()})"
        )
    t0 = float(inputs.requests["send_time_unix"].min())
    cut = unfinished(inputs.requests)
    links = find_chains(pd.concat([done, cut], ignore_index=True), inputs.run)
    done_links, cut_links = links.part(0, len(done)), links.part(len(done), len(done) + len(cut))
    extra = build_trace(cut, WorkloadEvidence(None, None), False, scale, t0, cut_links)
    trace = sorted(
        build_trace(done, evidence, False, scale, t0, done_links) + extra, key=lambda r: r.arrival_s
    )
    near = (
        sorted(build_trace(done, evidence, True, scale, t0, done_links) + extra, key=lambda r: r.arrival_s)
        if evidence.sharing
        else trace
    )
    if len(cut):
        axis += f"; {len(cut)} request(s) that failed mid-way are replayed at their target lengths"
    if len(trace) > MAX_REPLAY_REQUESTS:
        axis += f"; only the first {MAX_REPLAY_REQUESTS:,} of {len(trace):,} requests are replayed"
        trace, near = trace[:MAX_REPLAY_REQUESTS], near[:MAX_REPLAY_REQUESTS]
    if conversations := {t.conversation for t in evidence.turns if t.conversation >= 0}:
        axis += (
            f"; {len(conversations)} conversations replayed as sessions (each turn's prompt carries the "
            "previous turn's prompt and answer, after a stem shared between them)"
        )
    if links.source == "session_id":
        axis += (
            f"; {links.users} conversations replayed as chains (each turn its recorded gap after the "
            "previous turn finished in the replay), other requests at their send times"
        )
    elif links.source != "open_loop":
        how = "by user id" if links.source == "user_id" else "rebuilt from the timings: no user ids recorded"
        axis += (
            f"; closed loop: {links.users} users ({how}), each request sent its recorded gap after the "
            "user's previous one finished in the replay"
        )
    return Replayer(
        dep,
        trace,
        near,
        spec,
        config,
        scale,
        axis,
        len(inputs.requests) - len(done) - len(cut),
        fit,
        measured_run(done, preemptions),
        t0,
        basis.used,
    )
