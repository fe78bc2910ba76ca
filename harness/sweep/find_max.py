"""`kvscope sweep --find-max`: run the points `search` asks for, each a full bundle as in a
sweep (open-loop points watched and stopped once doomed, `doom`), then repeat the boundary's
two points for the spread, and write sweep.json with its `search` section.

sweep.json's `points` are the search's points (its table, knee and curve are the sweep's);
`search` holds their order, the boundary, the repeats and the spread of each boundary load's
attainment, and whether the boundary is KV-bound: the first failing load preempted while the
highest load met did not, so the pool, not compute, ends the SLO-meeting range (the failing
point's advice says what to change).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harness.analysis.slo import parse_slos
from harness.analysis.summary import write_summary
from harness.run.config import duration
from harness.sweep.config import SweepConfig
from harness.sweep.doom import DoomWatch
from harness.sweep.execute import run_point, say_sweep, serve_points
from harness.sweep.search import Boundary, Outcome, SearchSettings, boundary, next_load
from harness.sweep.table import load_label, point_row, write_results


def settings_of(cfg: SweepConfig) -> SearchSettings:
    low, high = cfg.loads
    ttft = parse_slos(cfg.slo).ttft
    point_s = duration(cfg.duration_per_point, "--duration-per-point")
    return SearchSettings(cfg.mode, low, high, cfg.attainment, cfg.tolerance, cfg.max_points, ttft, point_s)


def _measure(cfg: SweepConfig, index: int, load: float, target: str) -> tuple[dict[str, Any], Outcome]:
    from harness.report.write import write_report

    watch = None
    if cfg.mode == "rate":
        slos = parse_slos(cfg.slo)
        watch = DoomWatch.for_point(target, slos, cfg.attainment, load, duration(cfg.duration_per_point, "-"))
    bundle = run_point(cfg, index, load, target, watch)
    summary = write_summary(bundle, cfg.slo)
    write_report(bundle, slos=cfg.slo)
    row = point_row(index, cfg.mode, load, summary, bundle.name)
    stopped = watch.reason if watch is not None else None
    row["stopped_early"] = stopped
    if stopped:
        # The requests still queued or decoding when it stopped are in no record: the ones that
        # finished are the fast ones, so their attainment says nothing of the point's.
        row["attainment_of_finished"], row["attainment"] = row["attainment"], None
    attainment = row["attainment"]
    met = stopped is None and attainment is not None and attainment >= cfg.attainment
    return row, Outcome(load, attainment, met, row["requests_per_s"], stopped is not None)


def kv_bound(rows: list[dict[str, Any]], b: Boundary) -> dict[str, Any] | None:
    """Preemptions start at the boundary: the first failing load preempted, the best did not."""
    if b.best is None or b.first_failing is None:
        return None
    met = [r for r in rows if r["load"] == b.best]
    failed = [r for r in rows if r["load"] == b.first_failing]
    before = max((r["preemptions"] or 0) for r in met)
    after = max((r["preemptions"] or 0) for r in failed)
    if not (after > 0 and before == 0):
        return None
    first = failed[0]
    return {
        "preemptions_at_best": before,
        "preemptions_at_first_failing": after,
        "advice": f"{first['bundle']}/advice.json",
        "report": f"{first['bundle']}/report.html",
        "explanation": (
            f"KV-bound boundary: preemptions start at {load_label(first['load_kind'], first['load'])} "
            f"({after:.0f}) where {load_label(first['load_kind'], b.best)} had none: the KV pool, not "
            f"compute, ends the range; see {first['bundle']}/report.html (advice)"
        ),
    }


def spread(rows: list[dict[str, Any]], load: float | None) -> dict[str, Any] | None:
    runs = [r["attainment"] for r in rows if r["load"] == load and r["attainment"] is not None]
    if load is None or not runs:
        return None
    return {"load": load, "runs": len(runs), "attainment_min": min(runs), "attainment_max": max(runs)}


def search_section(
    cfg: SweepConfig, rows: list[dict[str, Any]], repeats: list[dict[str, Any]], done: list[Outcome]
) -> dict[str, Any]:
    b = boundary(settings_of(cfg), done)
    everything = rows + repeats
    bound = kv_bound(everything, b)
    return {
        "range": list(cfg.loads),
        "tolerance": cfg.tolerance,
        "max_points": cfg.max_points,
        "order": [o.to_dict() for o in done],
        "boundary": b.to_dict(),
        "repeats": repeats,
        "spread": [s for s in (spread(everything, b.best), spread(everything, b.first_failing)) if s],
        "kv_bound": bound,
        "points_run": len(rows) + len(repeats),
    }


def execute_find_max(cfg: SweepConfig, say: Callable[[str], None] = say_sweep) -> dict[str, Any]:
    """Search, repeat the boundary, write sweep.json/csv and the report; returns sweep.json."""
    from harness.report.write import write_report

    rows: list[dict[str, Any]] = []
    repeats: list[dict[str, Any]] = []
    done: list[Outcome] = []
    s = settings_of(cfg)

    def points(target: str) -> None:
        while (load := next_load(s, done)) is not None:
            t = time.monotonic()
            say(f"search point {len(done) + 1}: {load_label(cfg.mode, load)} for {cfg.duration_per_point}")
            row, outcome = _measure(cfg, len(rows), load, target)
            rows.append(row)
            done.append(outcome)
            note = f"; {row['stopped_early']}" if row["stopped_early"] else ""
            verdict = "met" if outcome.met else "missed"
            took = time.monotonic() - t
            say(f"  attainment {_pct(outcome.attainment)}: {verdict} the SLOs ({took:.0f} s{note})")
        b = boundary(s, done)
        say(b.reason)
        for load in (x for x in (b.best, b.first_failing) if x is not None):
            for k in range(cfg.repeats):
                say(f"repeat {k + 1}/{cfg.repeats} of {load_label(cfg.mode, load)}")
                row, _ = _measure(cfg, len(rows) + len(repeats), load, target)
                repeats.append({**row, "role": "repeat"})

    status, target = serve_points(cfg, say, points)
    result = write_results(cfg, rows, status, target, search_section(cfg, rows, repeats, done))
    write_report(cfg.out)
    return result


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"
