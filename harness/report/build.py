"""From a folder to a Document: load, summarise, draw the figures, pick run or sweep content.

Figures are written to DIR/plots/ (the Markdown report links them; the HTML embeds them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.advisor.record import Advice, read_advice
from harness.analysis.latency import itl_values, throughput_over_time, window_bounds
from harness.analysis.server import clip_to_window, timeline
from harness.analysis.sessions import bundle_sessions
from harness.analysis.slo import Slos, parse_slos, per_request_metrics
from harness.analysis.summary import slos_from_run, summarize
from harness.bundle.jsonfile import read_json_object
from harness.bundle.read import Bundle, measured, read_bundle
from harness.bundle.schema import SWEEP_JSON
from harness.report import plots
from harness.report.content import run_document
from harness.report.document import Document
from harness.report.probe_section import read_probe
from harness.report.run_report import RunReport
from harness.report.session_plots import sessions_by_turn
from harness.report.sweep_content import SweepReport, sweep_document
from harness.report.sweep_search import search_figure
from harness.report.verify_section import verify_figures


def run_figures(bundle: Bundle, slos: Slos) -> tuple[dict[str, Any], dict[str, str]]:
    d = bundle.path
    summary = summarize(bundle, slos)
    req = measured(bundle.requests)
    ok = req[req["ok"]]
    bounds = window_bounds(req)
    tl = timeline(clip_to_window(bundle.server, bounds))  # the samples summarize() used
    t0 = bounds[0] if bounds else (float(tl["time_unix"].iloc[0]) if len(tl) else 0.0)
    warm = warmup_span(bundle.requests, t0)
    if warm is not None and bounds is not None:  # the server timeline shows the warm-up too, shaded
        tl = timeline(clip_to_window(bundle.server, (t0 + warm[0], bounds[1])))
    plot_dir = d / "plots"
    made = {
        "latency_cdf": plots.latency_cdfs(
            ok, per_request_metrics(ok), itl_values(ok), slos, plot_dir / "latency_cdf.png"
        ),
        "server_timeline": plots.server_timeline(
            tl, ok, t0, summary["server"]["preemption_onset_unix"], plot_dir / "server_timeline.png", warm
        ),
        "throughput": plots.throughput_timeline(
            throughput_over_time(req), tl, t0, plot_dir / "throughput.png", warm
        ),
        "sessions": sessions_by_turn(bundle_sessions(bundle), plot_dir / "sessions.png"),
    }
    return summary, {k: str(p.relative_to(d)) for k, p in made.items() if p is not None}


def warmup_span(requests, t0: float) -> tuple[float, float] | None:
    """(first warm-up send, end of the warm-up) in seconds from `t0` (the first measured
    send, so both are <= 0), or None for a run without warm-up requests."""
    if "phase" not in requests.columns:
        return None
    sends = requests.loc[requests["phase"] == "warmup", "send_time_unix"].dropna()
    return None if sends.empty else (float(sends.min()) - t0, 0.0)


def sweep_figures(d: Path, sw: dict[str, Any]) -> dict[str, str]:
    import pandas as pd

    table = pd.DataFrame(sw.get("points") or [])
    knee = (sw.get("knee") or {}).get("index")
    best = (sw.get("best") or {}).get("index")
    slos = Slos(**sw.get("slos", {}))
    path = plots.sweep_curve(table, knee, best, slos, d / "plots" / "sweep.png")
    return {**({"sweep": str(path.relative_to(d))} if path else {}), **search_figure(d, sw)}


def build_document(d: Path, advice: Advice | None, slos: Slos | str | None) -> Document:
    """`advice` as the advisor just made it, else the folder's advice.json (if any)."""
    advice = advice if advice is not None else read_advice(d)
    if (d / SWEEP_JSON).exists():
        sw = read_json_object(d / SWEEP_JSON)
        return sweep_document(SweepReport(sw, sweep_figures(d, sw), advice))
    bundle = read_bundle(d)
    s = parse_slos(slos) if isinstance(slos, str) else (slos or slos_from_run(bundle.run))
    summary, figures = run_figures(bundle, s)
    figures.update(verify_figures(advice, d))
    return run_document(RunReport(summary, figures, advice, read_probe(d)))
