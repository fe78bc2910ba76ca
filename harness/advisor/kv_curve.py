"""The advisor's block-level verdicts, from a run's KV events (kv_events.parquet):

- add_memory (prefix reuse): the miss-ratio curve (exporter.kv_events.curve) says N more
  blocks raise the prefix hit ratio from A to B and save C prefill tokens per second. It is
  proposed when +200 % would gain at least CURVE_GAIN; the size is the smallest point that
  gets KNEE_SHARE of that gain. Verified when replaying the run's trace on the simulator with
  those N blocks raises the hit ratio by at least VERIFY_SHARE of the predicted gain.
- route_by_prefix: replicas cache the same blocks (at least ROUTE_SHARED of their cached
  blocks are cached elsewhere too): each computed those prefixes itself. Verified when
  the trace replayed on that many simulated replicas, each shared-prefix group sent to one
  replica, hits more than the same replicas fed round-robin.

A (the run's hit ratio) and the projection's H and Q come from the server's prefix-cache
counters over the run, the avoidable misses from the events (cumulative), so both cover the
same requests. The curve assumes admission was not short of blocks: under KV pressure more
blocks first run more requests at once, and a note says the projection is then an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

from exporter.kv_events.curve import POOL_INCREASES, projected_hit_ratio
from exporter.series import increase
from harness.advisor.capacity import base_blocks
from harness.advisor.fidelity import hit_ratio_off
from harness.advisor.record import Claim, Verdict
from harness.advisor.run_inputs import RunInputs
from harness.advisor.status import mark_replay, replay_status
from harness.advisor.whatif import Change, Replayer
from harness.bundle.finding import Finding
from harness.bundle.jsonfile import json_safe
from harness.bundle.kv_events import curve_column, latest, read_kv_events
from reference_engine.sim.replay import TraceRequest, replay_trace

CURVE_GAIN = 0.05
KNEE_SHARE = 0.8
VERIFY_SHARE = 0.5
MIN_VERIFIED_GAIN = 0.02
ROUTE_SHARED = 0.10
ROUTE_GAIN = 0.02


@dataclass(frozen=True, slots=True)
class CurveEvidence:
    target: str
    instance: str
    pool_blocks: int
    block_size: int
    queried_tokens: float
    hit_tokens: float
    seconds: float
    capacity_misses: int
    first_stores: int
    points: tuple[tuple[float, int, float], ...]  # (increase, extra blocks, avoidable misses)
    source: str = "the run's KV events"  # what the curve was computed from

    @property
    def hit_ratio(self) -> float:
        return self.hit_tokens / self.queried_tokens

    def projected(self, avoidable: float) -> float:
        return projected_hit_ratio(self.queried_tokens, self.hit_tokens, avoidable, self.block_size) or 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "instance": self.instance,
            "pool_blocks": self.pool_blocks,
            "block_size": self.block_size,
            "queried_tokens": self.queried_tokens,
            "hit_tokens": self.hit_tokens,
            "hit_ratio": round(self.hit_ratio, 4),
            "capacity_misses": self.capacity_misses,
            "first_stores": self.first_stores,
            "seconds": round(self.seconds, 1),
            "source": self.source,
            "curve": [
                {
                    "pool_increase": inc,
                    "extra_blocks": extra,
                    "avoidable_misses": avoidable,
                    "hit_ratio": round(self.projected(avoidable), 4),
                }
                for inc, extra, avoidable in self.points
            ],
        }


def _server_increase(server: pd.DataFrame, target: str, instance: str, column: str) -> float | None:
    rows = server[(server["target"] == target) & (server["instance"] == instance)]
    if rows.empty or column not in rows.columns:
        return None
    return increase(zip(rows["time_unix"], rows[column].where(rows[column].notna(), None)))


def curve_evidence(inputs: RunInputs, frame: pd.DataFrame) -> CurveEvidence | None:
    """The busiest instance's curve over the run; None without counters to anchor it."""
    rows = latest(frame)
    if rows.empty:
        return None
    row = rows.loc[rows["stored_blocks"].idxmax()]
    target, instance = str(row["target"]), str(row["instance"])
    q = _server_increase(inputs.server, target, instance, "prefix_cache_queries_tokens")
    h = _server_increase(inputs.server, target, instance, "prefix_cache_hits_tokens")
    if not q or h is None or not row["block_size"]:
        return None
    times = frame[(frame["target"] == target) & (frame["instance"] == instance)]["time_unix"]
    points = tuple(
        (inc, int(row[curve_column("extra_blocks", inc)]), float(row[curve_column("avoidable_blocks", inc)]))
        for inc in POOL_INCREASES
        if pd.notna(row.get(curve_column("avoidable_blocks", inc)))
    )
    return CurveEvidence(
        target,
        instance,
        int(row["pool_blocks"]),
        int(row["block_size"]),
        float(q),
        float(h),
        float(times.max() - times.min()),
        int(row["capacity_misses"]),
        int(row["first_stores"]),
        points,
    )


def _claim(action: str, title: str, evidence: dict, projected: dict, effect: str) -> dict[str, Any]:
    claim = Claim(action, title, evidence, projected, effect)
    return {f.name: json_safe(getattr(claim, f.name)) for f in fields(Claim)}


def add_memory_by_curve(
    ev: CurveEvidence,
    replayer: Replayer | None,
    kv_pressure: bool,
    notes: list[Finding],
    distrust: Finding | None = None,
) -> Verdict | None:
    if not ev.points:
        return None
    gains = [(inc, extra, ev.projected(avoidable) - ev.hit_ratio) for inc, extra, avoidable in ev.points]
    best = max(g for _, _, g in gains)
    if best < CURVE_GAIN:
        notes.append(
            Finding(
                "curve_gain_small",
                f"add_memory (prefix reuse): not advised: the miss-ratio curve gives +{gains[-1][0]:.0%} "
                f"blocks only {best:+.1%} of hit ratio ({ev.capacity_misses:,} capacity misses, "
                f"{ev.first_stores:,} first stores)",
                subject="add_memory",
            )
        )
        return None
    inc, extra, gain = next(g for g in gains if g[2] >= KNEE_SHARE * best)
    after = ev.hit_ratio + gain
    saved = gain * ev.queried_tokens / ev.seconds if ev.seconds > 0 else None
    effect = (
        f"{extra:,} more blocks (+{inc:.0%} of {ev.pool_blocks:,}) raise the prefix hit ratio from "
        f"{ev.hit_ratio:.0%} to {after:.0%}"
        + (f" and save {saved:,.0f} prefill tokens per second" if saved is not None else "")
        + f" (miss-ratio curve from {ev.source})"
    )
    projected = {
        "extra_blocks": extra,
        "pool_increase": inc,
        "pool_blocks": ev.pool_blocks + extra,
        "hit_ratio_before": round(ev.hit_ratio, 4),
        "hit_ratio": round(after, 4),
        "prefill_tokens_saved_per_second": None if saved is None else round(saved, 1),
        "upper_bound": kv_pressure,
    }
    if kv_pressure:
        notes.append(
            Finding(
                "curve_upper_bound",
                "add_memory (prefix reuse): the run was under KV pressure, so more blocks would first run "
                "more requests at once: the curve's hit ratio is an upper bound",
                subject="add_memory",
            )
        )
    claim = _claim("add_memory", f"Add {extra:,} KV blocks for prefix reuse", ev.to_dict(), projected, effect)
    base = base_blocks(replayer.deployment) if replayer is not None else None
    if replayer is None or base is None:
        return Verdict(**claim, verified=False)
    try:
        comparison = replayer.compare(Change(f"{extra:,} more blocks", num_blocks=base + extra))
    except ValueError as exc:
        notes.append(
            Finding("replay_failed", f"add_memory (prefix reuse): replay failed: {exc}", subject="add_memory")
        )
        return Verdict(**claim, verified=False)
    b, c = comparison.baseline.prefix_hit_ratio, comparison.changed.prefix_hit_ratio
    measured = None if b is None or c is None else c - b
    shown = measured is not None and measured >= max(MIN_VERIFIED_GAIN, VERIFY_SHARE * gain)
    distrust = distrust or hit_ratio_off(comparison.fidelity)  # the claim is about the hit ratio
    verified, status, reason = replay_status(shown, comparison.fidelity, distrust)
    replay = mark_replay(comparison.to_dict(), shown, distrust)
    replay["why"] = (
        Finding(
            "hit_ratio_replayed",
            f"replayed hit ratio {b:.1%} -> {c:.1%} (predicted {ev.hit_ratio:.1%} -> {after:.1%})",
        )
        if measured is not None
        else Finding("no_prefix_queries", "the replay measured no prefix-cache queries")
    ).to_dict()
    return Verdict(**claim, verified=verified, replay=json_safe(replay), status=status, status_reason=reason)


def _routed(trace: list[TraceRequest], replicas: int, by_prefix: bool) -> list[list[TraceRequest]]:
    parts: list[list[TraceRequest]] = [[] for _ in range(replicas)]
    turn = 0
    for req in trace:
        if by_prefix and req.prefix_group >= 0:
            parts[req.prefix_group % replicas].append(req)
        else:
            parts[turn % replicas].append(req)
            turn += 1
    return parts


def _fleet(replayer: Replayer, parts: list[list[TraceRequest]]) -> dict[str, Any]:
    results = [replay_trace(p, replayer.spec, replayer.config) for p in parts if p]
    queries = sum(r.prefix_cache_queries for r in results)
    ttft = [r.ttft_s / replayer.scale for res in results for r in res.records if r.ttft_s is not None]
    return {
        "completed": sum(len(r.records) for r in results),
        "prefix_hit_ratio": sum(r.prefix_cache_hits for r in results) / queries if queries else None,
        "computed_tokens": sum(r.computed_tokens for r in results),
        "ttft_p99_s": float(np.percentile(ttft, 99)) if ttft else None,
    }


def route_by_prefix(
    frame: pd.DataFrame, replayer: Replayer | None, notes: list[Finding], distrust: Finding | None = None
) -> Verdict | None:
    rows = latest(frame)
    if len(rows) < 2:  # one replica: nothing to route
        return None
    cached, shared = float(rows["cached_blocks"].sum()), float(rows["shared_blocks"].sum())
    share = shared / cached if cached else 0.0
    replicas = len(rows)
    if share < ROUTE_SHARED:
        notes.append(
            Finding(
                "prefixes_not_shared",
                f"route_by_prefix: not advised: {share:.0%} of the replicas' cached blocks are shared",
                subject="route_by_prefix",
            )
        )
        return None
    duplicated = int(shared - rows["fleet_shared_blocks"].iloc[-1])
    evidence = {
        "replicas": [
            {"target": t, "instance": i, "cached_blocks": int(c), "shared_blocks": int(s)}
            for t, i, c, s in zip(
                rows["target"], rows["instance"], rows["cached_blocks"], rows["shared_blocks"]
            )
        ],
        "shared_share": round(share, 4),
        "blocks_cached_on_several_replicas": int(rows["fleet_shared_blocks"].iloc[-1]),
    }
    effect = (
        f"{share:.0%} of the {replicas} replicas' cached blocks are cached on another replica too: "
        f"routing each shared prefix to one replica (llm-d, Dynamo, AIBrix: KV-aware routing) computes "
        f"~{duplicated:,} blocks once instead of on several replicas"
    )
    projected = {"duplicated_blocks": duplicated, "replicas": replicas}
    claim = _claim("route_by_prefix", "Route requests by prefix", evidence, projected, effect)
    if replayer is None or not any(r.prefix_group >= 0 for r in replayer.trace):
        if replayer is not None:
            notes.append(
                Finding(
                    "no_prefix_groups",
                    "route_by_prefix: not replayed: the run's prompts carry no shared-prefix groups",
                    subject="route_by_prefix",
                )
            )
        return Verdict(**claim, verified=False)
    spread = _fleet(replayer, _routed(replayer.trace, replicas, by_prefix=False))
    routed = _fleet(replayer, _routed(replayer.trace, replicas, by_prefix=True))
    b, c = spread["prefix_hit_ratio"], routed["prefix_hit_ratio"]
    shown = (
        b is not None and c is not None and c >= b + ROUTE_GAIN and routed["completed"] >= spread["completed"]
    )
    # Both sides are replays on the simulator (no measured baseline to match): its fidelity
    # to the run is the single-replica baseline's.
    verified, status, reason = replay_status(shown, replayer.fidelity(), distrust)
    replay = {
        "change": {"label": f"{replicas} replicas, each shared-prefix group on one"},
        "baseline": {"label": f"{replicas} replicas, round-robin", **spread},
        "changed": routed,
        "why": (
            Finding("routed_hit_ratio", f"hit ratio {b:.1%} round-robin -> {c:.1%} routed by prefix")
            if b is not None and c is not None
            else Finding("no_prefix_queries", "the replays measured no prefix-cache queries")
        ).to_dict(),
        "time_axis": replayer.time_axis,
    }
    mark_replay(replay, shown, distrust)
    return Verdict(**claim, verified=verified, replay=json_safe(replay), status=status, status_reason=reason)


def kv_event_verdicts(
    inputs: RunInputs,
    replayer: Replayer | None,
    kv_pressure: bool,
    notes: list[Finding],
    distrust: Finding | None = None,
) -> list[Verdict]:
    """The block-level verdicts of a run recorded with --kv-events (none otherwise); never
    verified when `distrust` says the replay of the run as it was does not resemble it."""
    frame = read_kv_events(inputs.path)
    if frame is None or frame.empty:
        return []
    out: list[Verdict] = []
    ev = curve_evidence(inputs, frame)
    if ev is None:
        notes.append(
            Finding(
                "no_prefix_counters",
                "KV events: no prefix-cache counters for the instance they came from; no curve",
            )
        )
    else:
        v = add_memory_by_curve(ev, replayer, kv_pressure, notes, distrust)
        out += [v] if v is not None else []
    v = route_by_prefix(frame, replayer, notes, distrust)
    out += [v] if v is not None else []
    return out
