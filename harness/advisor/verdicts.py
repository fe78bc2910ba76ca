"""The verdict rules: from a diagnosis and the workload evidence to proposed changes, each
with the numbers it rests on and its projected effect (all from `capacity` / `sizing`).

Rules (KV pressure and "not the bottleneck" are defined in `diagnose`):
- KV pressure ->
  quantize_kv_cache   when the cache is wider than 8 bits: the pool in the same memory
                      grows by bytes(dtype) / 1 (x2 from 16-bit);
  add_memory          the cheapest option (`capacity.memory_options`) whose pool holds
                      the demand: the peak blocks the run's trace uses on a pool that
                      never preempts (measured by replay; without a replay, the upper bound
                      peak requests x p99 length); not advised when that fits the pool;
  raise_memory_utilization  when gpu_memory_utilization < 0.9 and the arithmetic at 0.9
                      gives more blocks;
  cut_context         to the p99.9 of prompt + output rounded up, when it is at most half
                      of max_model_len and either the allocator reserves max_model_len
                      per request (contiguous) or some requests were longer than the cut
                      (a paged pool does not grow when the limit drops: without such
                      requests there is nothing to gain, and that is said in a note).
- not KV pressure but requests wait while usage is low -> kv_not_bottleneck.
A rule whose facts are unknown (`facts.NEEDS`: a --target server that stated no pool size,
cache dtype, ...) is not applied; `RuleOutcome.missing` says which facts it lacked.
- make_prefix_identical (independent of pressure): an unbounded cache would hit at least
  PREFIX_GAIN more of the prompt tokens if near-identical prefixes were byte-identical,
  over at least 2 requests. Identical prefixes the cache did not hit (observed hit ratio
  under half of what they offer) get a note: prefix caching off, or evicted before reuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from exporter.diagnosis import ACTIONS  # the names kvscope_advice{action=...} publishes
from harness.advisor import capacity
from harness.advisor.deployment import Deployment
from harness.advisor.diagnose import WindowDiagnosis
from harness.advisor.evidence import WorkloadEvidence
from harness.advisor.facts import missing_for, not_issued
from harness.advisor.record import Claim
from harness.advisor.sizing import blocks_for_tokens
from harness.advisor.whatif import Change
from harness.bundle.deployment_option import supply
from harness.bundle.finding import Finding
from harness.formatting import pct

NA = "n/a"

PREFIX_GAIN = 0.10
CUT_CONTEXT_MAX_SHARE = 0.5


__all__ = ["ACTIONS", "Proposal", "RuleOutcome", "decide"]


@dataclass(frozen=True, slots=True)
class Proposal(Claim):
    """A claim before its replay, with the what-if that tests it."""

    change: Change | None  # None: nothing to replay
    expect_gain: bool = True  # False: verified when the change does NOT help (kv_not_bottleneck)
    alternatives: tuple[Change, ...] = ()


@dataclass(slots=True)
class RuleOutcome:
    proposals: list[Proposal] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)  # rules considered and why they did not fire
    missing: dict[str, list[str]] = field(default_factory=dict)  # rule -> facts it lacked


def _pressure_evidence(d: WindowDiagnosis) -> dict[str, Any]:
    keys = (
        "preemptions",
        "preemptions_per_finished",
        "preemptions_per_minute",
        "saturated_share",
        "waiting_share",
        "waiting_kv_blocked_share",
        "max_usage",
        "mean_running",
    )
    n = d.numbers()
    return {"preemption_level": d.preemption_level, **{k: n[k] for k in keys}}


def quantize(dep: Deployment, d: WindowDiagnosis, demand: int | None) -> Proposal | None:
    if dep.kv_element_bytes <= 1:
        return None
    base, after = capacity.base_blocks(dep), capacity.changed_blocks(dep, kv_dtype="fp8")
    if base is None or after is None or after <= base:
        return None
    bs = dep.engine.block_size
    ev = {
        **_pressure_evidence(d),
        "kv_cache_dtype": dep.kv_dtype,
        "bytes_per_element": dep.kv_element_bytes,
        "kv_bytes_per_token_per_gpu": capacity.kv_bytes_per_token(dep),
        "kv_bytes_per_token_per_gpu_fp8": capacity.kv_bytes_per_token(dep, "fp8"),
        "pool_blocks": base,
        "demand_blocks": demand,
    }
    proj = {
        "pool_blocks": after,
        "pool_tokens": (after - 1) * bs,
        "capacity_factor": round(after / base, 3),
        "covers_demand": None if demand is None else after >= demand,
    }
    effect = (
        f"the same memory holds {after:,} blocks instead of {base:,} (x{after / base:.2f}, "
        f"{dep.kv_element_bytes} -> 1 byte per element); accuracy needs checking on the model "
        "(calibrated scales, per vLLM's quantized KV docs)"
    )
    return Proposal(
        "quantize_kv_cache",
        "Quantize the KV cache to fp8",
        ev,
        proj,
        effect,
        Change("kv_cache_dtype=fp8", kv_cache_dtype="fp8", num_blocks=after),
    )


def add_memory(
    dep: Deployment,
    d: WindowDiagnosis,
    demand: int | None,
    arithmetic_demand: int | None,
    notes: list[Finding],
    measured: bool = True,
) -> Proposal | None:
    base = capacity.base_blocks(dep) or 0
    if demand is None:
        notes.append(
            Finding(
                "demand_unknown",
                "add_memory: not sized: no replay and no running/waiting samples to estimate the demand",
                subject="add_memory",
            )
        )
        return None
    if demand < base:
        notes.append(
            Finding(
                "demand_within_pool",
                f"add_memory: not advised: the replayed trace peaks at {demand:,} blocks, within the run's "
                f"{base:,}; the pressure comes from load the bundle does not record",
                subject="add_memory",
            )
        )
        return None
    options = capacity.memory_options(dep, demand)
    if not options:
        return None
    best = options[0]
    ev = {
        **_pressure_evidence(d),
        "pool_blocks": base,
        "demand_blocks": demand,
        "demand_source": "replay on a pool that never runs out" if measured else "peak requests x p99 length",
        "demand_tokens": demand * dep.engine.block_size,
        "upper_bound_blocks_peak_requests_x_p99": arithmetic_demand,
        "options": [
            {
                "option": o.label,
                "gpus": o.gpus,
                "pool_blocks_per_replica": o.num_blocks,
                "total_memory_gib": o.total_memory_gib,
            }
            for o in options
        ],
    }
    proj = {
        "option": best.label,
        "pool_blocks": best.num_blocks,
        "replicas": best.replicas,
        "gpus": best.gpus,
        "capacity_factor": round(best.num_blocks * best.replicas / base, 3) if base else None,
    }
    per_token = capacity.kv_bytes_per_token(dep)
    extra = (
        f", {(best.num_blocks - base) * dep.engine.block_size * per_token / (1 << 20):,.0f} MiB more KV"
        if best.kind == "num_blocks" and per_token
        else ""
    )
    total = best.num_blocks * best.replicas
    effect = (
        f"{best.label}: {total:,} blocks (x{total / base:.2f}{extra}) for the "
        f"{'measured' if measured else 'estimated (upper bound)'} peak demand of {demand:,} blocks, "
        "where the "
        f"run had {base:,}"
    )
    change = Change(
        f"add memory: {best.label}",
        gpu=best.gpu if best.kind == "larger_gpu" else None,
        tp=best.tp if best.kind == "tensor_parallel" else None,
        num_blocks=best.num_blocks,
        replicas=best.replicas,
    )
    return Proposal("add_memory", f"Add KV memory: {best.label}", ev, proj, effect, change)


def raise_utilisation(dep: Deployment, d: WindowDiagnosis) -> Proposal | None:
    gmu, target = dep.gpu_memory_utilization, capacity.MEMORY_UTILIZATION_TARGET
    if gmu is None or gmu >= target or not dep.gpu_sized:
        return None
    base, after = capacity.base_blocks(dep), capacity.changed_blocks(dep, utilisation=target)
    if base is None or after is None or after <= base:
        return None
    ev = {**_pressure_evidence(d), "gpu_memory_utilization": gmu, "pool_blocks": base}
    proj = {"gpu_memory_utilization": target, "pool_blocks": after, "capacity_factor": round(after / base, 3)}
    effect = f"gpu_memory_utilization {gmu:g} -> {target:g}: {base:,} -> {after:,} blocks"
    return Proposal(
        "raise_memory_utilization",
        f"Raise gpu_memory_utilization to {target:g}",
        ev,
        proj,
        effect,
        Change(f"gpu_memory_utilization={target:g}", gpu_memory_utilization=target, num_blocks=after),
    )


def cut_context(
    dep: Deployment, d: WindowDiagnosis, work: WorkloadEvidence, notes: list[Finding]
) -> Proposal | None:
    lengths, limit = work.lengths, dep.max_model_len
    if lengths is None or not limit:
        return None
    cut, bs = lengths.suggested_max_model_len, dep.engine.block_size
    if cut > CUT_CONTEXT_MAX_SHARE * limit:
        notes.append(
            Finding(
                "context_limit_close",
                f"cut_context: not advised: p99.9 of prompt + output is {lengths.p999_tokens:,.0f} tokens, "
                f"the limit {limit:,} is not even twice the {cut:,} a cut could go to",
                subject="cut_context",
            )
        )
        return None
    contiguous = dep.engine.allocator.startswith("contiguous")
    if not contiguous and lengths.over_suggested == 0:
        notes.append(
            Finding(
                "context_never_exceeded",
                f"cut_context: not advised: every request fit in {cut:,} tokens (longest "
                f"{lengths.max_tokens:,} of max_model_len {limit:,}), and a paged pool does not grow when "
                "max_model_len drops; it only bounds one request's blocks",
                subject="cut_context",
            )
        )
        return None
    pool = capacity.base_blocks(dep) or 0
    per_req_before, per_req_after = blocks_for_tokens(limit, bs), blocks_for_tokens(cut, bs)
    ev = {
        **_pressure_evidence(d),
        "max_model_len": limit,
        "p50_tokens": lengths.p50_tokens,
        "p99_tokens": lengths.p99_tokens,
        "p999_tokens": lengths.p999_tokens,
        "max_tokens": lengths.max_tokens,
        "max_share_of_limit": lengths.max_share_of_limit,
        "allocator": dep.engine.allocator,
        "pool_blocks": pool,
    }
    proj = {
        "max_model_len": cut,
        "requests_over_cut": lengths.over_suggested,
        "concurrency_at_limit_before": (pool - 1) // per_req_before,
        "concurrency_at_limit_after": (pool - 1) // per_req_after,
    }
    how = (
        "each request reserves max_model_len up front"
        if contiguous
        else f"{lengths.over_suggested} request(s) longer than the cut would be refused or truncated"
    )
    effect = (
        f"max_model_len {limit:,} -> {cut:,} (p99.9 {lengths.p999_tokens:,.0f} rounded up): "
        "requests of the full length that fit at once go "
        f"{proj['concurrency_at_limit_before']:,} -> {proj['concurrency_at_limit_after']:,}; {how}"
    )
    return Proposal(
        "cut_context",
        f"Cut max_model_len to {cut:,}",
        ev,
        proj,
        effect,
        Change(f"max_model_len={cut}", max_model_len=cut),
    )


def not_bottleneck(dep: Deployment, d: WindowDiagnosis) -> Proposal:
    base = capacity.base_blocks(dep)
    seqs = dep.known("max_num_seqs")
    ev = {
        "waiting_share": d.numbers()["waiting_share"],
        "waiting_low_usage_share": d.numbers()["waiting_low_usage_share"],
        "max_usage": d.numbers()["max_usage"],
        "mean_running": d.numbers()["mean_running"],
        "max_running": d.max_running,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": dep.known("max_num_batched_tokens"),
        "preemption_level": d.preemption_level,
    }
    limited = seqs is not None and d.max_running is not None and d.max_running >= seqs
    where = (
        f"the running batch sits at max_num_seqs={seqs}"
        if limited
        else "compute or the per-step token budget limit admission"
        if seqs is not None
        else f"which limit binds is unknown (max_num_seqs unknown: {supply('max_num_seqs')})"
    )
    effect = (
        f"requests waited in {pct(d.waiting_share, 0, NA)} of the run while KV usage peaked at "
        f"{pct(d.max_usage, 0, NA)}: more KV memory will not help; {where}"
    )
    change = Change("double the KV pool", num_blocks=None if base is None else 2 * base - 1)
    alternatives = (Change(f"max_num_seqs={4 * seqs}", max_num_seqs=4 * seqs),) if limited else ()
    return Proposal(
        "kv_not_bottleneck",
        "The KV cache is not the bottleneck",
        ev,
        {"limit": where},
        effect,
        change if base is not None else None,
        expect_gain=False,
        alternatives=alternatives,
    )


def make_identical(work: WorkloadEvidence) -> Proposal | None:
    p = work.prefixes
    if p is None or p.near_identical_requests < 2 or p.near_hit_ratio - p.identical_hit_ratio < PREFIX_GAIN:
        return None
    ev = {
        "fingerprinted_requests": p.requests,
        "prompt_tokens": p.prompt_tokens,
        "identical_hit_ratio_possible": round(p.identical_hit_ratio, 4),
        "near_identical_hit_ratio_possible": round(p.near_hit_ratio, 4),
        "observed_hit_ratio": None if p.observed_hit_ratio is None else round(p.observed_hit_ratio, 4),
        "near_identical_requests": p.near_identical_requests,
        "differing_span_start_chars_p50": p.hole_start_chars_p50,
        "differing_span_end_chars_p50": p.hole_end_chars_p50,
        "blocked_shared_tokens_p50": p.blocked_tokens_p50,
    }
    proj = {
        "hit_ratio_possible": round(p.near_hit_ratio, 4),
        "prefill_tokens_saved": p.near_hit_tokens - p.identical_hit_tokens,
    }
    start, end = p.hole_start_chars_p50 or 0, p.hole_end_chars_p50 or 0
    effect = (
        f"{p.near_identical_requests} prompts share ~{p.blocked_tokens_p50 or 0:,.0f} tokens after a span "
        f"that differs (characters ~{start:,.0f}-{end:,.0f}, e.g. a timestamp or an id): put the shared "
        "part first and keep it byte-identical, and the cacheable share of prompt tokens goes "
        f"{p.identical_hit_ratio:.0%} -> "
        f"{p.near_hit_ratio:.0%}"
    )
    return Proposal(
        "make_prefix_identical",
        "Put the shared part of prompts first and keep it byte-identical",
        ev,
        proj,
        effect,
        Change("near-identical prefixes made identical", prefix_identical=True),
    )


def decide(
    dep: Deployment,
    d: WindowDiagnosis,
    work: WorkloadEvidence,
    demand: int | None = None,
    arithmetic_demand: int | None = None,
) -> RuleOutcome:
    """Every proposal the rules make for one run (unordered; the advice orders them). `demand`
    is the replay-measured peak in blocks; without it the arithmetic upper bound stands in."""
    out = RuleOutcome()
    if d.kv_pressure:
        need = demand if demand is not None else arithmetic_demand
        rules = {
            "quantize_kv_cache": lambda: quantize(dep, d, need),
            "add_memory": lambda: add_memory(dep, d, need, arithmetic_demand, out.notes, demand is not None),
            "raise_memory_utilization": lambda: raise_utilisation(dep, d),
            "cut_context": lambda: cut_context(dep, d, work, out.notes),
        }
        for action, rule in rules.items():
            if lacking := missing_for(dep, action):
                out.missing[action] = lacking
                out.notes.append(not_issued(action, lacking))
            elif (p := rule()) is not None:
                out.proposals.append(p)
    elif d.kv_not_bottleneck:
        out.proposals.append(not_bottleneck(dep, d))
        if dep.known("max_num_seqs") is None:
            out.missing["kv_not_bottleneck"] = ["max_num_seqs"]
    else:
        out.notes.append(
            Finding(
                "no_kv_pressure",
                f"no KV pressure: preemption level {d.preemption_level}, saturated "
                f"{pct(d.saturated_share, 0, NA)} of the time, waiting {pct(d.waiting_share, 0, NA)}",
            )
        )
    prefix = make_identical(work)
    if prefix is not None:
        out.proposals.append(prefix)
    elif work.prefixes is None:
        out.notes.append(
            Finding(
                "no_prompt_fingerprints",
                "make_prefix_identical: no prompt fingerprints in requests.parquet; prefix sharing unknown",
                subject="make_prefix_identical",
            )
        )
    out.notes += _cache_reuse_notes(dep, work)
    return out


def _cache_reuse_notes(dep: Deployment, work: WorkloadEvidence) -> list[Finding]:
    """Identical prefixes the cache did not hit: prefix caching off, or evicted before reuse."""
    p = work.prefixes
    if p is None or p.observed_hit_ratio is None or p.identical_hit_ratio < PREFIX_GAIN:
        return []
    if p.observed_hit_ratio >= 0.5 * p.identical_hit_ratio:
        return []
    seen = (
        f"prefix cache: {p.observed_hit_ratio:.0%} of prompt tokens hit, while byte-identical prefixes "
        f"offer {p.identical_hit_ratio:.0%}"
    )
    evicted = "shared blocks are evicted before they are reused (KV pressure, or too many distinct prefixes)"
    caching = dep.known("enable_prefix_caching")
    if caching is False:
        return [Finding("prefix_caching_off", f"{seen}: prefix caching is off (--no-enable-prefix-caching)")]
    if caching:
        return [Finding("prefix_blocks_evicted", f"{seen}: {evicted}")]
    return [Finding("prefix_cache_missed", f"{seen}: prefix caching is off on the server, or {evicted}")]
