"""The run report's sessions section (multi-turn and agentic runs): what the prefix cache
kept of each conversation, turn by turn, how sessions ended, and what an evicted history
cost. Reads summary.json's `sessions` (`harness.analysis.sessions`); None for other runs."""

from __future__ import annotations

from harness.formatting import ms_cell, num, pct
from harness.report.document import Image, Para, Section, Table
from harness.report.run_report import RunReport

TURN_HEADERS = ["turn", "requests", "TTFT p50 ms", "TTFT p90 ms", "prompt tokens", "cached tokens",
                "hit ratio", "history evicted"]  # fmt: skip


def _turn_row(t: dict) -> list[str]:
    return [
        str(t["turn"]),
        str(t["requests"]),
        ms_cell(t["ttft"]["p50"]),
        ms_cell(t["ttft"]["p90"]),
        num(t["prompt_tokens_mean"], 0),
        num(t["cached_tokens_mean"], 0),
        pct(t["hit_ratio"]),
        str(t["evicted"]),
    ]


def sessions_section(r: RunReport) -> Section | None:
    s = r.summary.get("sessions")
    if not s:
        return None
    sec = Section("Sessions")
    if s.get("verdict"):
        sec.blocks.append(Para(s["verdict"]))
    sec.blocks.append(
        Table(
            TURN_HEADERS,
            [_turn_row(t) for t in s["by_turn"]],
            f"by turn index over every session that reached it; 'history evicted': turns whose cached tokens "
            f"fell below the previous turn's prompt less one block ({s['block_size']} tokens)",
        )
    )
    done = s["completion_time_s"]
    rows = [[end, str(n)] for end, n in sorted(s["ends"].items())]
    rows += [
        ["completed sessions' time p50 / p90", f"{ms_cell(done['p50'])} / {ms_cell(done['p90'])} ms"],
        ["sessions whose history was evicted", str(s["sessions_evicted"])],
        ["sessions with a preempted turn (server-reported)", str(s["sessions_preempted"])],
        [
            "TTFT p50, history evicted / kept",
            f"{ms_cell(s['ttft_evicted']['p50'])} / {ms_cell(s['ttft_kept']['p50'])} ms",
        ],  # fmt: skip
    ]
    sec.blocks.append(Table(["how sessions ended", "count"], rows))
    if "sessions" in r.figures:
        sec.blocks.append(
            Image(r.figures["sessions"], "prompt and cached tokens, hit ratio and TTFT by turn")
        )
    return sec
