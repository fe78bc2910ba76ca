"""The sessions figure: what the prefix cache kept of each conversation, turn by turn
(`harness.analysis.sessions`), drawn with matplotlib's Agg canvas as `plots` draws.

Left: mean prompt and cached tokens per turn index, and the prefix hit ratio on its own axis
(it rises with the turn while the cache holds the sessions). Right: TTFT p50 and p90 per turn
index, and, when some turns found their history evicted, their TTFT p50 against the p50 of
the turns that found it kept. None when there is nothing to draw.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.analysis.sessions import SessionAnalysis

BAR_WIDTH = 0.4
DPI = 100


def _values(rows: list, get) -> np.ndarray:
    return np.array([np.nan if get(r) is None else get(r) for r in rows], dtype=float)


def sessions_by_turn(analysis: SessionAnalysis | None, path: Path) -> Path | None:
    """Tokens, hit ratio and TTFT by turn index; None for a run without sessions."""
    rows = analysis.by_turn if analysis else []
    if not rows:
        return None
    turns = np.array([r.turn for r in rows], dtype=float)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    tokens, latency = fig.subplots(1, 2)
    tokens.bar(
        turns - BAR_WIDTH / 2, _values(rows, lambda r: r.prompt_tokens_mean), BAR_WIDTH, label="prompt"
    )
    tokens.bar(
        turns + BAR_WIDTH / 2, _values(rows, lambda r: r.cached_tokens_mean), BAR_WIDTH, label="cached"
    )
    tokens.set_xlabel("turn")
    tokens.set_ylabel("tokens (mean)")
    ratio = tokens.twinx()
    ratio.plot(turns, _values(rows, lambda r: r.hit_ratio), color="black", marker="o", label="hit ratio")
    ratio.set_ylim(0, 1.02)
    ratio.set_ylabel("prefix hit ratio")
    handles = tokens.get_legend_handles_labels()[0] + ratio.get_legend_handles_labels()[0]
    tokens.legend(handles=handles, fontsize=8, loc="upper left")
    tokens.set_title(f"Prompt and cached tokens by turn ({analysis.sessions} sessions)")
    for q in ("p50", "p90"):
        latency.plot(
            turns, _values(rows, lambda r, q=q: r.ttft.get(q)) * 1000.0, marker="o", label=f"TTFT {q}"
        )
    if analysis.evicted_turns and analysis.ttft_evicted.p50 is not None:
        latency.axhline(analysis.ttft_evicted.p50 * 1000.0, color="red", linestyle="--",
                        label=f"p50 of {analysis.evicted_turns} turns with the history evicted")  # fmt: skip
        if analysis.ttft_kept.p50 is not None:
            latency.axhline(analysis.ttft_kept.p50 * 1000.0, color="grey", linestyle=":",
                            label="p50 of turns with the history kept")  # fmt: skip
    latency.set_xlabel("turn")
    latency.set_ylabel("ms")
    latency.set_title("TTFT by turn")
    latency.grid(alpha=0.3)
    latency.legend(fontsize=8)
    for ax in (tokens, latency):
        ax.set_xticks(turns)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI, format="png")
    return path
