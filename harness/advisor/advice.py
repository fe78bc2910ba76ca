"""The advisor on a finished run: diagnosis + workload evidence -> proposals -> replays ->
verdicts, and advice.json.

Order of work: load the bundle (`run_inputs`), diagnose the main engine instance's samples
(`diagnose`, which runs the exporter's rules), gather the workload evidence (`evidence`),
measure the run's KV demand by replaying its trace on a pool that never runs out, let the
rules propose (`verdicts`), replay every proposal against the run's own settings
(`whatif`) and keep the outcome. A verdict is `verified` only when its replay confirmed
it, and only when the replay of the run as it was resembles the run (`plausibility`);
unverified verdicts are kept (with the replay that failed to confirm them) and sorted
last, so the advice never claims more than was measured. Facts a rule or the replays need
and no source stated (`facts`) are listed in `missing_facts`, each with the `--deployment`
key that states it. A run recorded with --kv-events adds the block-level verdicts
(`kv_curve`: add_memory from the miss-ratio curve, route_by_prefix); a run with sessions adds
their evidence (`session_evidence`: history share, reuse-distance curve, context limit) and,
without a curve from KV events, add_memory from the sessions' curve (`session_advice`).

Invariant: every number in a verdict is in its `evidence`, `projected` or `replay` dict.
"""

from __future__ import annotations

import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from harness.advisor import capacity
from harness.advisor.deployment import Deployment
from harness.advisor.diagnose import WindowDiagnosis, diagnose_window, main_window, windows_from_server_frame
from harness.advisor.evidence import WorkloadEvidence, completed, workload_evidence
from harness.advisor.facts import REPLAYS, collect
from harness.advisor.kv_curve import kv_event_verdicts
from harness.advisor.measured_terms import with_measured_terms
from harness.advisor.plausibility import implausible
from harness.advisor.record import ADVICE_JSON, Advice, Claim, Verdict
from harness.advisor.replay_basis import replay_basis
from harness.advisor.run_inputs import RunInputs
from harness.advisor.session_advice import context_notes, session_add_memory
from harness.advisor.session_evidence import session_evidence
from harness.advisor.sizing import blocks_for_tokens
from harness.advisor.status import mark_replay, replay_status
from harness.advisor.verdicts import Proposal, decide
from harness.advisor.whatif import Change, Comparison, Replayer, judge, make_replayer
from harness.bundle.finding import Finding
from harness.bundle.jsonfile import json_safe, write_json
from harness.bundle.kv_events import has_kv_events

MAX_AMPLE_BLOCKS = 500_000  # ~8 M tokens at block size 16; building it takes ~0.5 s


ENGINE_VIEW = ("block_size", "max_num_seqs", "max_num_batched_tokens", "allocator", "enable_prefix_caching")


def deployment_view(dep: Deployment) -> dict[str, Any]:
    """advice.json's `deployment`: stated settings, None for those no source stated (listed
    under `unstated`, with the cache dtype when it is assumed)."""
    return {
        "bundled_engine": dep.bundled,
        "simulated": dep.simulated,
        "model": dep.model,
        "engine_model": dep.known("model"),
        "gpu": dep.gpu,
        "tensor_parallel_size": dep.tp,
        "gpu_memory_utilization": dep.gpu_memory_utilization,
        "kv_cache_dtype": dep.kv_dtype,
        "num_blocks": capacity.base_blocks(dep) if dep.bundled else dep.num_blocks,  # stated, not derived
        "max_model_len": dep.max_model_len,
        **{name: dep.known(name) for name in ENGINE_VIEW},
        "unstated": [name for name in ("kv_cache_dtype", *ENGINE_VIEW) if name in dep.unstated]
        + sorted(dep.catalogue_unstated),
    }


def admission_tokens(dep: Deployment, work: WorkloadEvidence | None) -> int:
    """Free KV tokens a new request needs to be admitted: a contiguous allocator reserves
    max_model_len; a paged engine needs its first prompt chunk (typical prompt, capped by the
    token budget). 0 when unknown."""
    if dep.known("allocator") == "contiguous" and dep.max_model_len:
        return dep.max_model_len
    if work is None or work.lengths is None:
        return 0
    prompt, budget = work.lengths.prompt_p50_tokens, dep.known("max_num_batched_tokens")
    return int(prompt if budget is None else min(prompt, budget))


def diagnose_run(inputs: RunInputs, work: WorkloadEvidence | None = None) -> WindowDiagnosis | None:
    dep = inputs.deployment
    windows = windows_from_server_frame(inputs.server, dep.stated_kv_dtype, dep.gpu_memory_utilization)
    main = main_window(windows)
    if main is None:
        return None
    (target, _, _), window = main
    return diagnose_window(
        window,
        target,
        finished_fallback=len(completed(inputs.requests)),
        admission_tokens=admission_tokens(dep, work),
    )


def _upper_bound_demand(inputs: RunInputs, work: WorkloadEvidence) -> int | None:
    """Arithmetic demand: the most requests the engine held at once (running + waiting) x the
    blocks of a p99-long request. An upper bound (not every request is at full length)."""
    server, bs = inputs.server, inputs.deployment.engine.block_size
    if (
        inputs.deployment.unknown(("block_size",))
        or not {"requests_running", "requests_waiting"} <= set(server.columns)
        or work.lengths is None
        or server.empty
    ):
        return None
    peak = (server["requests_running"].fillna(0) + server["requests_waiting"].fillna(0)).max()
    return (
        int(peak) * blocks_for_tokens(math.ceil(work.lengths.p99_tokens), bs)
        if peak == peak and peak > 0
        else None
    )


def _replayed_demand(replayer: Replayer, inputs: RunInputs) -> tuple[int | None, Finding | None]:
    """(blocks the run's trace peaks at on a pool that never runs out, a note)."""
    done = completed(inputs.requests)
    dep = inputs.deployment
    bs = dep.engine.block_size
    reserve = (
        blocks_for_tokens(dep.max_model_len, bs)
        if dep.engine.allocator == "contiguous" and dep.max_model_len
        else 0
    )
    total = sum(
        max(reserve, blocks_for_tokens(int(p) + int(o), bs))
        for p, o in zip(done["prompt_tokens"], done["output_tokens"])
    )
    ample = min(total + 2, MAX_AMPLE_BLOCKS)
    note = (
        None
        if ample == total + 2
        else Finding("demand_capped", f"demand capped: the trace needs up to {total:,} blocks")
    )
    metrics = replayer.run(Change("no KV limit", num_blocks=ample))
    return (math.ceil(metrics.peak_kv_usage * (ample - 1)) if metrics.completed else None), note


def _verdict(
    p: Proposal, replayer: Replayer | None, notes: list[Finding], distrust: Finding | None = None
) -> Verdict:
    claim = {f.name: json_safe(getattr(p, f.name)) for f in fields(Claim)}
    if p.change is None or replayer is None:
        return Verdict(**claim, verified=False)
    try:
        comparison = replayer.compare(p.change)
    except ValueError as exc:  # e.g. a change the engine refuses (a pool too small for one request)
        notes.append(Finding("replay_failed", f"{p.action}: replay failed: {exc}", subject=p.action))
        return Verdict(**claim, verified=False)
    shown = comparison.shown
    replay = comparison.to_dict()
    if not p.expect_gain:  # kv_not_bottleneck: confirmed when more KV memory does not help
        gained, why = judge(comparison.baseline, comparison.changed)
        shown = not gained
        replay["why"] = (
            Finding("more_kv_changes_nothing", "more KV memory changes nothing measurable")
            if shown
            else Finding("more_kv_helps", f"more KV memory helps after all: {why.text}")
        ).to_dict()
    mark_replay(replay, shown, distrust)
    verified, status, reason = replay_status(shown, comparison.fidelity, distrust)
    alternatives = []
    for alt in p.alternatives:
        try:
            c: Comparison = replayer.compare(alt)
        except ValueError as exc:
            notes.append(
                Finding(
                    "alternative_replay_failed",
                    f"{p.action}: replay of {alt.label} failed: {exc}",
                    subject=p.action,
                )
            )
            continue
        alternatives.append(json_safe(c.to_dict()))
    return Verdict(
        **claim,
        verified=verified,
        replay=json_safe(replay),
        alternatives=alternatives,
        status=status,
        status_reason=reason,
    )


STATUS_ORDER = ("verified", "indicative", "not confirmed", "not replayed")


def _trusted_baseline(replayer: Replayer, inputs: RunInputs, notes: list[Finding]) -> Finding | None:
    """Why the replays cannot verify (an implausible baseline), noted once; None when they can."""
    why = implausible(replayer.baseline(), completed(inputs.requests))
    if why:
        notes.append(Finding("replays_not_trusted", f"replays not trusted: {why.text}"))
    return why


def _rank(v: Verdict) -> tuple:
    r = v.replay or {}
    base, changed = r.get("baseline") or {}, r.get("changed") or {}
    fewer = (base.get("preemptions") or 0) - (changed.get("preemptions") or 0)
    ttft = (base.get("ttft_p99_s") or 0) - (changed.get("ttft_p99_s") or 0)
    rank = STATUS_ORDER.index(v.status) if v.status in STATUS_ORDER else len(STATUS_ORDER)
    return (rank, -fewer, -ttft)


def worth_replaying(diag: WindowDiagnosis) -> bool:
    """Replays cost CPU on the load generator (seconds for a long run): the demand replay and
    the baseline only for a run with pressure to explain (KV pressure, or requests waiting
    while KV is free); otherwise a replay only for a proposal that needs one verified."""
    return bool(diag.kv_pressure or diag.kv_not_bottleneck)


def _replayer(
    inputs: RunInputs, work: WorkloadEvidence, diag: WindowDiagnosis, notes: list[Finding]
) -> tuple[Replayer | None, Finding | None]:
    """(the run's replayer, why its baseline cannot be trusted or None); (None, None) when
    there is nothing to replay."""
    if completed(inputs.requests).empty:
        return None, None
    try:
        replayer = make_replayer(inputs, work, diag.mean_running, diag.preemptions)
    except ValueError as exc:
        notes.append(Finding("no_replay", f"no replay: {exc}"))
        return None, None
    return replayer, _trusted_baseline(replayer, inputs, notes)


def advise(inputs: RunInputs, replay: bool = True) -> Advice:
    """The advice for one run (see the module doc)."""
    dep = inputs.deployment
    work = workload_evidence(inputs)
    diag = diagnose_run(inputs, work)
    notes: list[Finding] = list(inputs.notes)
    needed: dict[str, list[str]] = {}
    workload = {
        "lengths": None if work.lengths is None else asdict(work.lengths),
        "prefixes": None
        if work.prefixes is None
        else {
            **asdict(work.prefixes),
            "identical_hit_ratio": work.prefixes.identical_hit_ratio,
            "near_hit_ratio": work.prefixes.near_hit_ratio,
        },
    }
    # A run with errors above the limit, or an unreliable client, still ran to its end.
    if inputs.run.get("status") not in (None, "completed", "errors", "unreliable"):
        notes.append(
            Finding(
                "run_incomplete",
                f"the run did not complete (status {inputs.run.get('status')!r}): "
                f"{' '.join(str(inputs.run.get('failure') or 'see run.json').split())[:300]}",
            )
        )
    if diag is None:
        notes.append(
            Finding("no_engine_samples", "server.parquet has no samples from the engine: no diagnosis")
        )
        return Advice(str(inputs.path or ""), deployment_view(dep), {}, json_safe(workload), [], notes)
    demand, upper = None, _upper_bound_demand(inputs, work)
    replayer, distrust = None, None
    if replay and (lacking := replay_basis(dep, inputs.requests, inputs.run).missing):
        needed[REPLAYS] = lacking
        notes.append(
            Finding(
                "replays_need_facts",
                f"no replay: the simulator would have to guess {', '.join(lacking)} (see missing_facts); "
                "verdicts stay unverified",
            )
        )
        replay = False
    if replay and worth_replaying(diag):
        replayer, distrust = _replayer(inputs, work, diag, notes)
    if replayer is not None and diag.kv_pressure:
        try:
            demand, note = _replayed_demand(replayer, inputs)
            notes += [note] if note else []
        except ValueError as exc:
            notes.append(Finding("demand_replay_failed", f"no replay: {exc}"))
    if demand is None and upper is not None and diag.kv_pressure:
        notes.append(
            Finding(
                "demand_from_arithmetic",
                "KV demand from arithmetic (peak requests x p99 length), not measured by replay: "
                "an upper bound",
            )
        )
    outcome = decide(dep, diag, work, demand, upper)
    notes += outcome.notes
    needed = {**outcome.missing, **needed}
    done = completed(inputs.requests)
    sessions = session_evidence(
        done, work.turns, work.prefix_groups(done) if work.sharing else [(-1, 0)] * len(done),
        dep.engine.block_size, capacity.base_blocks(dep), dep.max_model_len,
    )  # fmt: skip
    if sessions is not None:
        workload["sessions"] = sessions.to_dict()
        notes += context_notes(sessions)
    # The block-level verdicts of a run recorded with --kv-events, and those of sessions, are replayed too.
    to_verify = any(p.change for p in outcome.proposals) or has_kv_events(inputs.path) or sessions is not None
    if replay and replayer is None and to_verify:
        replayer, distrust = _replayer(inputs, work, diag, notes)
    elif replay and replayer is None:
        notes.append(
            Finding(
                "no_replays_needed",
                "no replays: the run shows no KV pressure or queueing, and no proposal to verify",
            )
        )
    proposals = with_measured_terms(outcome.proposals, inputs.path, inputs.requests, notes)
    verdicts = [_verdict(p, replayer, notes, distrust) for p in proposals]
    by_events = kv_event_verdicts(inputs, replayer, diag.kv_pressure, notes, distrust)
    verdicts += by_events
    if sessions is not None and not any(v.action == "add_memory" for v in by_events):
        by_sessions = session_add_memory(
            sessions, done, dep.engine.block_size, replayer, diag.kv_pressure, notes, distrust
        )
        verdicts += [by_sessions] if by_sessions is not None else []
    verdicts = sorted(verdicts, key=_rank)
    diagnosis = {
        **diag.numbers(),
        "preemption_level": diag.preemption_level,
        "kv_pressure": diag.kv_pressure,
        "kv_not_bottleneck": diag.kv_not_bottleneck,
        "demand_blocks": demand,
        "exporter_advice": [a for a, on in diag.exporter_advice.items() if on],
        "exporter_reasons": diag.exporter_reasons,
    }
    if replayer is not None and replayer.excluded:
        notes.append(
            Finding(
                "replay_excludes_failed",
                f"{replayer.excluded} request(s) without token counts (failed) are not in the replays",
            )
        )
    recorded = (
        int(inputs.requests["ok"].fillna(False).astype(bool).sum()) if "ok" in inputs.requests.columns else 0
    )
    if diag.finished is not None and diag.finished > 1.2 * recorded + 2:
        notes.append(
            Finding(
                "replay_carries_less_load",
                f"the server finished {diag.finished:,.0f} requests but the bundle records {recorded:,} "
                "completed ones (e.g. requests still in flight when the run stopped leave no record): "
                "the replays carry less load than the run did",
            )
        )
    fidelity = replayer.fidelity() if replayer is not None and any(v.replay for v in verdicts) else None
    return Advice(
        str(inputs.path or ""),
        json_safe(deployment_view(dep)),
        json_safe(diagnosis),
        json_safe(workload),
        verdicts,
        notes,
        replayer.time_axis if replayer else None,
        [m.to_json() for m in collect(needed)],
        json_safe(fidelity.to_dict()) if fidelity else None,
    )


def write_advice(advice: Advice, directory: str | Path, markdown: str | None = None) -> dict[str, Any]:
    """advice.json, with the Advice section as Markdown under `markdown` when given (the
    report renders it: `harness.report.advice.advice_markdown`); returns the file's content."""
    data = {**json_safe(advice.to_json()), **({"markdown": markdown} if markdown is not None else {})}
    write_json(Path(directory) / ADVICE_JSON, data)
    return data
