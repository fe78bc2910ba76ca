"""A sweep's results: one row per point (from its summary), the knee and the highest load
that meets the SLOs, sweep.json and sweep.csv, and the table printed at the end.

Invariant: sweep.json and the printed table come from the same rows, built by `point_row`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from harness.analysis.knee import find_knee, highest_meeting
from harness.analysis.slo import parse_slos
from harness.bundle.jsonfile import write_json
from harness.bundle.schema import SWEEP_JSON
from harness.formatting import ms
from harness.sweep.config import SweepConfig

SCHEMA = "kvscope.sweep/1"
LATENCY_METRIC = "e2e_p99_s"  # the knee's latency: E2E includes queueing (TTFT) and decode slowdown (TPOT)
THROUGHPUT_METRIC = "output_tokens_per_s"


def load_label(mode: str, load: float) -> str:
    return f"{load:g}/s" if mode == "rate" else f"{load:g} user{'' if load == 1 else 's'}"


def point_row(index: int, mode: str, load: float, summary: dict[str, Any], bundle: str) -> dict[str, Any]:
    lat, tp = summary["latency"], summary["throughput"]
    return {
        "point": index,
        "load_kind": mode,
        "load": load,
        "load_label": load_label(mode, load),
        "requests": summary["requests"]["total"],
        "ok": summary["requests"]["ok"],
        "failed": summary["requests"]["failed"],
        "requests_per_s": tp["requests_per_s"],
        "output_tokens_per_s": tp["output_tokens_per_s"],
        "ttft_p50_s": lat["ttft"]["p50"],
        "ttft_p99_s": lat["ttft"]["p99"],
        "tpot_p50_s": lat["tpot"]["p50"],
        "tpot_p99_s": lat["tpot"]["p99"],
        "e2e_p50_s": lat["e2e"]["p50"],
        "e2e_p99_s": lat["e2e"]["p99"],
        "attainment": summary["goodput"]["attainment"] if summary["slos"] else None,
        "goodput_requests_per_s": summary["goodput"]["requests_per_s"] if summary["slos"] else None,
        "peak_kv_usage_ratio": summary["server"]["peak_kv_usage_ratio"],
        "preemptions": summary["server"]["preemptions"],
        "reliable": summary["reliable"],
        "bundle": bundle,
    }


def analyse(rows: list[dict[str, Any]], cfg: SweepConfig) -> dict[str, Any]:
    """Knee and highest SLO-meeting point over the rows, ordered by load (see analysis.knee)."""
    table = (
        pd.DataFrame(rows).sort_values("load", kind="stable").reset_index(drop=True)
        if rows
        else pd.DataFrame()
    )
    if table.empty:
        return {"points": [], "knee": None, "best": None}
    knee = find_knee(
        table[THROUGHPUT_METRIC].tolist(), table[LATENCY_METRIC].tolist(), table["load_label"].tolist()
    )
    best = highest_meeting(table["attainment"].tolist(), cfg.attainment) if cfg.slo else None
    return {
        "points": table.to_dict(orient="records"),
        "knee": {
            **knee.to_dict(),
            "load": None if knee.index is None else float(table["load"][knee.index]),
            "load_label": None if knee.index is None else table["load_label"][knee.index],
        },
        "best": None
        if best is None
        else {"index": best, "load": float(table["load"][best]), "load_label": table["load_label"][best]},
        "best_explanation": _best_text(cfg, best, table),
    }


def _best_text(cfg: SweepConfig, best: int | None, table: pd.DataFrame) -> str:
    if not cfg.slo:
        return "no SLOs given (--slo): no SLO-meeting load to report"
    slos = parse_slos(cfg.slo).describe()
    if best is None:
        return f"no tested load met the SLOs ({slos}) for {cfg.attainment:.0%} of requests"
    return (
        f"highest load meeting the SLOs ({slos}) for at least {cfg.attainment:.0%} of requests: "
        f"{table['load_label'][best]} ({table[THROUGHPUT_METRIC][best]:.1f} output tok/s)"
    )


def write_results(
    cfg: SweepConfig,
    rows: list[dict[str, Any]],
    status: str,
    target: str,
    search: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`search`: --find-max's section (`find_max.search_section`), kept under "search"."""
    result = {
        "schema": SCHEMA,
        "status": status,
        "target": target,
        "config": cfg.to_dict(),
        "slos": parse_slos(cfg.slo).to_dict(),
        "attainment_target": cfg.attainment,
        "latency_metric": LATENCY_METRIC,
        "throughput_metric": THROUGHPUT_METRIC,
        **analyse(rows, cfg),
        **({"search": search} if search is not None else {}),
    }
    write_json(cfg.out / SWEEP_JSON, result)
    pd.DataFrame(result["points"]).to_csv(cfg.out / "sweep.csv", index=False)
    return result


def format_table(result: dict[str, Any]) -> str:
    latencies = ("ttft_p50_s", "ttft_p99_s", "tpot_p99_s", "e2e_p99_s")
    head = f"{'load':>10} {'req/s':>7} {'out tok/s':>10} "
    head += " ".join(f"{h:>9}" for h in ("TTFT p50", "TTFT p99", "TPOT p99", "E2E p99"))
    lines = [f"{head} {'SLO ok':>7} reliable"]
    for p in result["points"]:
        att = "-" if p["attainment"] is None else f"{p['attainment']:.0%}"
        row = f"{p['load_label']:>10} {p['requests_per_s']:>7.2f} {p['output_tokens_per_s']:>10.1f} "
        row += " ".join(f"{ms(p[k], unit='ms'):>9}" for k in latencies)
        lines.append(f"{row} {att:>7} {'yes' if p['reliable'] else 'NO'}")
    knee = result.get("knee") or {}
    lines.append(knee.get("explanation") or "no points")
    lines.append(result.get("best_explanation") or "")
    search = result.get("search") or {}
    if search:
        lines.append(f"search: {search['boundary']['reason']} ({search['points_run']} runs)")
        lines += [
            f"  {s['load']:g}: attainment {s['attainment_min']:.0%}-{s['attainment_max']:.0%} "
            f"over {s['runs']} runs"
            for s in search["spread"]
        ]
        if search.get("kv_bound"):
            lines.append(search["kv_bound"]["explanation"])
    return "\n".join(lines)
