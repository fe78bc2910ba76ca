"""The report's figures, drawn with matplotlib's Agg canvas (no display, no pyplot state).

Each function takes frames, writes one PNG and returns its path, or returns None when there
is nothing to draw (a figure with empty axes would suggest data that was never measured).
Times are seconds from the first request's send, the same origin on every figure, so a
TTFT spike and a KV-usage plateau line up by eye.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.analysis.slo import Slos

DPI = 100


def save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI, format="png")
    return path


def _cdf(ax: Any, values: np.ndarray, title: str, slo: float | None) -> None:
    v = np.sort(values[np.isfinite(values)]) * 1000.0
    if v.size == 0:
        ax.set_title(f"{title}: no data")
        return
    ax.plot(v, np.arange(1, v.size + 1) / v.size, drawstyle="steps-post")
    for q, style in ((50, ":"), (99, "--")):
        x = np.percentile(v, q)
        ax.axvline(x, color="grey", linestyle=style, linewidth=1, label=f"p{q} {x:.0f} ms")
    if slo is not None:
        ax.axvline(slo * 1000.0, color="red", linewidth=1, label=f"SLO {slo * 1000:.0f} ms")
    ax.set_title(title)
    ax.set_xlabel("ms")
    ax.set_ylabel("share of requests")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


def latency_cdfs(
    ok: pd.DataFrame, metrics: pd.DataFrame, itl: np.ndarray, slos: Slos, path: Path
) -> Path | None:
    """CDFs of TTFT, TPOT, ITL (every gap pooled) and E2E of successful requests."""
    if ok.empty:
        return None
    fig = Figure(figsize=(10, 7), layout="constrained")
    axes = fig.subplots(2, 2)
    _cdf(axes[0, 0], ok["ttft_s"].to_numpy(float), "TTFT", slos.ttft)
    _cdf(axes[0, 1], metrics["tpot"].to_numpy(float), "TPOT (per request)", slos.tpot)
    _cdf(axes[1, 0], itl, "Inter-token latency, every gap pooled", slos.itl)
    _cdf(axes[1, 1], ok["e2e_s"].to_numpy(float), "E2E", slos.e2e)
    fig.suptitle("Latency CDFs (successful requests)")
    return save(fig, path)


def _ttft_overlay(ax: Any, ok: pd.DataFrame, t0: float) -> None:
    twin = ax.twinx()
    y = ok["ttft_s"].to_numpy(float) * 1000.0
    twin.scatter(ok["send_time_unix"] - t0, y, s=6, color="tab:red", alpha=0.5, label="TTFT (by send time)")
    finite = y[np.isfinite(y) & (y > 0)]
    if finite.size and finite.max() / finite.min() > 50:  # tens of ms next to tens of seconds: log scale
        twin.set_yscale("log")
    twin.set_ylabel("TTFT ms", color="tab:red")
    twin.tick_params(axis="y", colors="tab:red")


def _warmup(ax: Any, warmup: tuple[float, float] | None) -> None:
    """Shade the warm-up (seconds from t0, before 0): recorded, in no statistic."""
    if warmup is not None:
        ax.axvspan(warmup[0], warmup[1], color="grey", alpha=0.15, label="warm-up (not measured)")


def server_timeline(
    tl: pd.DataFrame,
    ok: pd.DataFrame,
    t0: float,
    onset: float | None,
    path: Path,
    warmup: tuple[float, float] | None = None,
) -> Path | None:
    """KV usage (+ prefix hit ratio), running/waiting and preemptions over time, TTFT overlaid;
    the warm-up, when the run had one, shaded before 0."""
    if tl.empty:
        return None
    t = tl["time_unix"] - t0
    fig = Figure(figsize=(10, 9), layout="constrained")
    ax_kv, ax_q, ax_p = fig.subplots(3, 1, sharex=True)
    ax_kv.plot(t, tl["kv_usage_ratio"] * 100.0, label="KV usage %")
    if tl["prefix_hit_ratio"].notna().any():
        ax_kv.plot(
            t, tl["prefix_hit_ratio"] * 100.0, linestyle="--", label="prefix hit ratio % (10 s window)"
        )
    ax_kv.set_ylim(0, 105)
    ax_kv.set_ylabel("%")
    ax_kv.set_title("KV cache usage, with each request's TTFT at its send time")
    ax_kv.legend(fontsize=8, loc="upper left")
    ax_q.plot(t, tl["requests_running"], label="running")
    ax_q.plot(t, tl["requests_waiting"], label="waiting")
    ax_q.set_ylabel("requests")
    ax_q.set_title("Scheduler queue")
    ax_q.legend(fontsize=8, loc="upper left")
    ax_p.bar(t, tl["preemptions_delta"], width=0.8, color="tab:purple", label="preemptions per sample")
    # A count is never negative; with no preemption matplotlib would centre the axis on 0.
    ax_p.set_ylim(0, max(1.0, float(np.nanmax(tl["preemptions_delta"].to_numpy(float), initial=0.0)) * 1.1))
    ax_p.set_ylabel("preemptions")
    ax_p.set_title("Preemptions (counter increase per sample)")
    ax_p.set_xlabel("seconds from the first request")
    ax_p.legend(fontsize=8, loc="upper left")
    for ax in (ax_kv, ax_q, ax_p):
        ax.grid(alpha=0.3)
        _warmup(ax, warmup)
        if onset is not None:
            ax.axvline(onset - t0, color="black", linestyle=":", linewidth=1)
    if not ok.empty:
        _ttft_overlay(ax_kv, ok, t0)
        _ttft_overlay(ax_p, ok, t0)
    return save(fig, path)


def throughput_timeline(
    tp: pd.DataFrame, tl: pd.DataFrame, t0: float, path: Path, warmup: tuple[float, float] | None = None
) -> Path | None:
    """Client completions per second and output tokens per second; the server's generation rate."""
    if tp.empty:
        return None
    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax = fig.subplots()
    _warmup(ax, warmup)
    ax.step(tp["t_s"], tp["output_tokens_per_s"], where="post", label="output tok/s (client, by completion)")
    if not tl.empty and tl["generation_tokens_per_s"].notna().any():
        ax.plot(
            tl["time_unix"] - t0,
            tl["generation_tokens_per_s"],
            label="generation tok/s (server, 10 s window)",
        )
    ax.set_ylabel("tokens / s")
    ax.set_xlabel("seconds from the first request")
    twin = ax.twinx()
    twin.step(
        tp["t_s"],
        tp["requests_per_s"],
        where="post",
        color="tab:green",
        alpha=0.6,
        label="requests/s completed",
    )
    twin.set_ylabel("requests / s", color="tab:green")
    ax.grid(alpha=0.3)
    lines = ax.get_legend_handles_labels()
    extra = twin.get_legend_handles_labels()
    ax.legend(lines[0] + extra[0], lines[1] + extra[1], fontsize=8, loc="upper left")
    ax.set_title("Throughput over time")
    return save(fig, path)


def sweep_curve(
    table: pd.DataFrame, knee_index: int | None, best_index: int | None, slos: Slos, path: Path
) -> Path | None:
    """Achieved output tokens/s against TTFT p99 and E2E p99, one marker per point, labelled by load."""
    if table.empty:
        return None
    fig = Figure(figsize=(10, 5), layout="constrained")
    ax_t, ax_e = fig.subplots(1, 2)
    x = table["output_tokens_per_s"].to_numpy(float)
    for ax, col, name, slo in (
        (ax_t, "ttft_p99_s", "TTFT p99", slos.ttft),
        (ax_e, "e2e_p99_s", "E2E p99", slos.e2e),
    ):
        y = table[col].to_numpy(float) * 1000.0
        ax.plot(x, y, marker="o")
        for xi, yi, label in zip(x, y, table["load_label"]):
            ax.annotate(str(label), (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
        if knee_index is not None:
            ax.scatter(
                [x[knee_index]], [y[knee_index]], s=160, facecolors="none", edgecolors="red", label="knee"
            )
        if best_index is not None:
            ax.scatter(
                [x[best_index]],
                [y[best_index]],
                s=80,
                marker="*",
                color="green",
                label="highest load meeting SLOs",
            )
        if slo is not None:
            ax.axhline(
                slo * 1000.0, color="red", linestyle="--", linewidth=1, label=f"SLO {slo * 1000:.0f} ms"
            )
        ax.set_xlabel("achieved output tokens / s")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"Throughput vs {name}")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper left")
    return save(fig, path)
