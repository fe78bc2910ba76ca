"""The report's section for `sweep --find-max` (sweep.json's `search`): the boundary, the points
searched in their order, the spread of the boundary's repeats, a KV-bound boundary with a
link to the advice, and the plot of the search (attainment against load, each point numbered
in the order it ran, the boundary shaded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import ScalarFormatter

from harness.formatting import pct
from harness.report.document import Block, Bullets, Image, Para, Table
from harness.report.plots import save

FIGURE = "search"


def search_plot(search: dict[str, Any], target: float, mode: str, path: Path) -> Path | None:
    order = search.get("order") or []
    if not order:
        return None
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.subplots()
    b = search.get("boundary") or {}
    if b.get("best") is not None and b.get("first_failing") is not None:
        ax.axvspan(b["best"], b["first_failing"], color="tab:orange", alpha=0.2, label="boundary")
    for i, o in enumerate(order, 1):
        y = o["attainment"] if o["attainment"] is not None else 0.0
        color = "tab:green" if o["met"] else "tab:red"
        ax.scatter([o["load"]], [y], color=color, marker="x" if o["stopped_early"] else "o", s=60, zorder=3)
        ax.annotate(str(i), (o["load"], y), textcoords="offset points", xytext=(5, 5), fontsize=9)
    reps = search.get("repeats") or []
    if reps:
        ax.scatter(
            [r["load"] for r in reps],
            [r["attainment"] or 0.0 for r in reps],
            color="grey",
            s=20,
            label="repeats",
            zorder=2,
        )
    ax.axhline(target, color="red", linestyle="--", linewidth=1, label=f"attainment target {target:.0%}")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(ScalarFormatter())
    ax.set_xlabel("requests / s" if mode == "rate" else "concurrent users")
    ax.set_ylabel("SLO attainment")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Search: points in the order they ran (x: stopped early)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return save(fig, path)


def search_figure(d: Path, sw: dict[str, Any]) -> dict[str, str]:
    search = sw.get("search")
    if not search:
        return {}
    cfg = sw.get("config") or {}
    target, mode = sw.get("attainment_target", 0.9), cfg.get("mode", "rate")
    path = search_plot(search, target, mode, d / "plots" / "search.png")
    return {FIGURE: str(path.relative_to(d))} if path else {}


def search_blocks(sw: dict[str, Any], figures: dict[str, str]) -> list[Block]:
    search = sw["search"]
    b = search["boundary"]
    blocks: list[Block] = [
        Para(b["reason"], strong=True),
        Para(
            f"{len(search['order'])} search points and {len(search['repeats'])} repeats "
            f"({search['points_run']} runs) over {search['range'][0]:g} to {search['range'][1]:g}, "
            f"tolerance {search['tolerance']:.0%}."
        ),
    ]
    if search.get("kv_bound"):
        blocks.append(Para(search["kv_bound"]["explanation"], strong=True))
    rows = [
        [
            str(i),
            f"{o['load']:g}",
            pct(o["attainment"]),
            "met" if o["met"] else "missed",
            "stopped early" if o["stopped_early"] else "",
        ]
        for i, o in enumerate(search["order"], 1)
    ]
    head = ["#", "load", "SLO attainment", "SLOs", "note"]
    blocks.append(Table(head, rows, "points in the order the search ran them"))
    if search["spread"]:
        blocks.append(
            Bullets(
                [
                    f"{s['load']:g}: attainment {pct(s['attainment_min'])} to {pct(s['attainment_max'])} "
                    f"over {s['runs']} runs"
                    for s in search["spread"]
                ]
            )
        )
    if FIGURE in figures:
        blocks.append(Image(figures[FIGURE], "the search: attainment against load"))
    return blocks
