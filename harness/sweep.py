"""`kvscope sweep`: one short `kvscope run` per load point, then a table, a curve and a knee.

Each point is a full `kvscope run` in a subprocess (`--target` the same server every time),
so a point is exactly what a user would get by hand, its bundle is complete and reportable on
its own, and Locust's gevent monkey-patching never touches this process. Without --target
the bundled engine starts once, before the first point, and serves every point: restarting
it would add minutes of model load per point and throw away nothing worth throwing away
(the prefix cache is part of the steady state a sweep measures). The analysis copes with an
engine reused across points: counters are read as increases, never as absolute values.

Outputs in --out: point-NN/ (a bundle with its own report), sweep.json, sweep.csv, and the
sweep report (report.md, report.html, plots/sweep.png). Invariant: sweep.json and the table
printed at the end come from the same rows, built by `point_row` from each point's summary.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness import procs
from harness.analysis.knee import DEFAULT_ATTAINMENT, find_knee, highest_meeting
from harness.analysis.slo import parse_slos
from harness.analysis.summary import write_summary

SCHEMA = "kvscope.sweep/1"
LATENCY_METRIC = "e2e_p99_s"  # the knee's latency: E2E includes queueing (TTFT) and decode slowdown (TPOT)
THROUGHPUT_METRIC = "output_tokens_per_s"
_LISTENING = re.compile(r"listening on (http://\S+)")


@dataclass(slots=True)
class SweepConfig:
    mode: str  # "rate" or "concurrency"
    loads: list[float]
    out: Path
    target: str | None = None
    workload: str = "chat"
    duration_per_point: str = "20s"
    slo: str = ""
    attainment: float = DEFAULT_ATTAINMENT
    model: str | None = None
    run_args: list[str] = field(default_factory=list)  # passed to every `kvscope run` verbatim
    engine_args: list[str] = field(default_factory=list)  # passed to `kvscope engine serve`
    startup_timeout_s: float = 300.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        return d


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


def write_results(cfg: SweepConfig, rows: list[dict[str, Any]], status: str, target: str) -> dict[str, Any]:
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
    }
    (cfg.out / "sweep.json").write_text(
        json.dumps(result, indent=2, allow_nan=False, default=str) + "\n", encoding="utf-8"
    )
    pd.DataFrame(result["points"]).to_csv(cfg.out / "sweep.csv", index=False)
    return result


def start_engine(cfg: SweepConfig) -> tuple[procs.Child, str]:
    """The bundled engine on a free port; returns (child, base URL) once /health answers."""
    port = procs.free_port()
    argv = [
        sys.executable,
        "-m",
        "harness.cli",
        "engine",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--model",
        cfg.model or "tiny-random",
        *cfg.engine_args,
    ]
    child = procs.start("engine", argv, cfg.out / "logs")
    url = f"http://127.0.0.1:{port}"
    ok, reason = procs.wait_http(url + "/health", cfg.startup_timeout_s, child)
    if not ok:
        tail = child.log_tail()
        child.stop()
        raise RuntimeError(f"the engine did not become healthy ({reason}):\n{tail}")
    return child, url


def run_point(cfg: SweepConfig, index: int, load: float, target: str) -> Path:
    out = cfg.out / f"point-{index:02d}"
    argv = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        "--target",
        target,
        "--workload",
        cfg.workload,
        "--duration",
        cfg.duration_per_point,
        "--out",
        str(out),
        "--quiet",
        *cfg.run_args,
    ]
    argv += (
        ["--rate", f"{load:g}"]
        if cfg.mode == "rate"
        else ["--users", str(int(load)), "--spawn-rate", str(int(load))]
    )
    if cfg.target and cfg.model:
        argv += ["--model", cfg.model]
    with open(cfg.out / "logs" / f"point-{index:02d}.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            # The run got the same Ctrl-C and is stopping Locust and writing its bundle; killing
            # it now (as subprocess.call would) would orphan its engine and Locust processes.
            proc.wait()
            raise
    if rc not in (0, 1) or not (out / "requests.parquet").exists():
        raise RuntimeError(
            f"`kvscope run` for point {index} ({load_label(cfg.mode, load)}) exited {rc}; "
            f"see {cfg.out / 'logs' / f'point-{index:02d}.log'}"
        )
    return out


def execute(
    cfg: SweepConfig, say=lambda m: print(f"kvscope sweep: {m}", file=sys.stderr, flush=True)
) -> dict[str, Any]:
    """Run every point, write sweep.json/csv and the reports; returns sweep.json's content."""
    from harness.report import write_report

    (cfg.out / "logs").mkdir(parents=True, exist_ok=True)
    engine = None
    rows: list[dict[str, Any]] = []
    status = "completed"
    target = cfg.target or ""
    try:
        if cfg.target is None:
            say(f"starting the bundled engine ({cfg.model or 'tiny-random'}) once for all points")
            engine, target = start_engine(cfg)
        for i, load in enumerate(cfg.loads):
            t = time.monotonic()
            say(f"point {i + 1}/{len(cfg.loads)}: {load_label(cfg.mode, load)} for {cfg.duration_per_point}")
            bundle = run_point(cfg, i, load, target)
            summary = write_summary(bundle, cfg.slo or None)
            write_report(bundle, slos=cfg.slo or None)
            rows.append(point_row(i, cfg.mode, load, summary, bundle.name))
            say(
                f"  {summary['throughput']['output_tokens_per_s']:.1f} output tok/s, E2E p99 "
                f"{(summary['latency']['e2e']['p99'] or 0) * 1000:.0f} ms ({time.monotonic() - t:.0f} s)"
            )
    except KeyboardInterrupt:
        status = "interrupted"
    except RuntimeError as exc:
        status = f"failed: {exc}"
        say(f"error: {exc}")
    finally:
        if engine is not None:
            engine.stop()
    result = write_results(cfg, rows, status, target)
    write_report(cfg.out)
    return result


def format_table(result: dict[str, Any]) -> str:
    head = f"{'load':>10} {'req/s':>7} {'out tok/s':>10} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p99':>9} {'E2E p99':>9} {'SLO ok':>7} reliable"
    lines = [head]
    for p in result["points"]:

        def ms(k: str, p=p) -> str:
            return "-" if p[k] is None else f"{p[k] * 1000:.0f}ms"

        att = "-" if p["attainment"] is None else f"{p['attainment']:.0%}"
        lines.append(
            f"{p['load_label']:>10} {p['requests_per_s']:>7.2f} {p['output_tokens_per_s']:>10.1f} {ms('ttft_p50_s'):>9} "
            f"{ms('ttft_p99_s'):>9} {ms('tpot_p99_s'):>9} {ms('e2e_p99_s'):>9} {att:>7} {'yes' if p['reliable'] else 'NO'}"
        )
    knee = result.get("knee") or {}
    lines.append(knee.get("explanation") or "no points")
    lines.append(result.get("best_explanation") or "")
    return "\n".join(lines)
