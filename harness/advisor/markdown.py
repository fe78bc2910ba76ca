"""The Advice section of a report, in Markdown, from an `Advice` (what advice.json holds).

One numbered item per verdict, verified ones first (the order advice.json already has):
title and status (verified, indicative and why, not confirmed, not replayed), what the
replay measured, the projected effect, and the evidence it rests on as a table of named
quantities with units. Before the verdicts, how well the replay of the unchanged
configuration reproduced the run. Rules that were considered and did not fire are listed
under "Also checked" so an empty advice is still an explanation.
"""

from __future__ import annotations

from typing import Any

from harness.advisor.check_text import check_line
from harness.advisor.evidence_table import evidence_rows, markdown_table
from harness.advisor.record import Advice

_METRICS = (
    ("preemptions", "preemptions", "{:,.0f}", ""),
    ("ttft_p99_s", "TTFT p99", "{:.3g}", " s"),
    ("output_tokens_per_s", "output", "{:,.0f}", " tok/s"),
    ("completed", "completed", "{:,.0f}", ""),
    ("prefix_hit_ratio", "prefix hit ratio", "{:.1%}", ""),
)


def _fmt(value: Any, pattern: str) -> str:
    if value is None:
        return "n/a"
    if pattern == "{:.3g}" and abs(value) >= 1000:  # 1,314 rather than 1.31e+03
        return f"{value:,.0f}"
    return pattern.format(value)


def replay_line(replay: dict[str, Any]) -> str:
    base, changed = replay.get("baseline") or {}, replay.get("changed") or {}
    parts = [
        f"{label} {_fmt(base.get(k), p)} -> {_fmt(changed.get(k), p)}{unit}" for k, label, p, unit in _METRICS
    ]
    return "; ".join(parts)


def _error(e: float | None) -> str:
    return "" if e is None else f", {e:+.0%}"


def fidelity_line(f: dict[str, Any]) -> str:
    """How the unchanged configuration's replay compares with the run."""
    m = f.get("measured") or {}
    verdict = "replays can verify" if f.get("within") else "what-ifs are indicative only"
    return (
        f"Replay fidelity: the unchanged configuration replayed gives "
        f"{_fmt(f.get('replayed_preemptions'), '{:,.0f}')} preemptions (measured "
        f"{_fmt(m.get('preemptions'), '{:,.0f}')}{_error(f.get('preemption_error'))}) and TTFT p99 "
        f"{_fmt(f.get('replayed_ttft_p99_s'), '{:.3g}')} s "
        f"(measured {_fmt(m.get('ttft_p99_s'), '{:.3g}')} s, "
        f"{m.get('ttft_source')}{_error(f.get('ttft_error'))}): "
        f"{'within' if f.get('within') else 'not within'} {f.get('tolerance', 0.25):.0%}, so {verdict}."
    )


def render(advice: Advice, heading: str = "## Advice") -> str:
    """Markdown for one Advice (what advice.json holds)."""
    lines = [heading, ""]
    verdicts, diag = advice.verdicts, advice.diagnosis
    if diag:
        lines.append(
            f"KV pressure: **{'yes' if diag.get('kv_pressure') else 'no'}** (preemption level "
            f"{diag.get('preemption_level')}, {_fmt(diag.get('preemptions_per_finished'), '{:.3g}')} "
            f"preemptions per finished request, {_fmt(diag.get('preemptions_per_minute'), '{:.3g}')} per "
            f"minute; KV saturated {_fmt(diag.get('saturated_share'), '{:.0%}')} of the time; requests "
            f"waiting {_fmt(diag.get('waiting_share'), '{:.0%}')} of the time, "
            f"{_fmt(diag.get('waiting_kv_blocked_share'), '{:.0%}')} for want of free KV blocks)."
        )
        lines.append("")
    if advice.fidelity:
        lines += [fidelity_line(advice.fidelity), ""]
    if not verdicts:
        lines += ["No change advised: the KV cache is not under pressure in this run.", ""]
    for i, v in enumerate(verdicts, 1):
        status = {
            "verified": "verified by replay",
            "indicative": "indicative: the replay shows the gain, but its baseline misses the run",
            "not confirmed": "not confirmed by replay",
        }.get(v.status, "not replayed")
        lines.append(f"{i}. **{v.title}** (`{v.action}`, {status})")
        lines.append(f"   - Effect: {v.effect}")
        replay = v.replay
        if replay:
            lines.append(
                f"   - Replay of `{replay['change'].get('label')}`, {replay.get('why')}: "
                f"{replay_line(replay)}"
            )
        for alt in v.alternatives:
            lines.append(
                f"   - Also replayed `{alt['change'].get('label')}`, {alt.get('why')}: {replay_line(alt)}"
            )
        if v.status == "indicative" and v.status_reason:
            lines.append(f"   - Why indicative: {v.status_reason}")
        if v.check:
            lines.append(f"   - Checked on the server: {check_line(v.action, v.check)}")
        rows = evidence_rows(v.evidence)
        if rows:
            # Blank lines that keep the item's indent: the table stays inside the list item.
            lines += ["   - Evidence:", "     ", *markdown_table(rows, "     "), "     "]
        options = v.evidence.get("options")
        if options:
            lines.append(
                "   - Options: "
                + "; ".join(
                    f"{o['option']} ({o['gpus']} GPUs, {o['total_memory_gib']} GiB)"
                    if o.get("total_memory_gib")
                    else o["option"]
                    for o in options
                )
            )
    if advice.missing_facts:
        lines += ["", "Facts the advice lacks (no source stated them; nothing was assumed):"]
        lines += [
            f"- `{m['fact']}`, for {', '.join(m['needed_for'])}: state it with `{m['supply']}`"
            for m in advice.missing_facts
        ]
    if advice.notes:
        lines += ["", "Also checked:"] + [f"- {n}" for n in advice.notes]
    if advice.time_axis:
        lines += [
            "",
            f"Replays run the run's own requests on the simulator; time axis {advice.time_axis}.",
        ]
    return "\n".join(lines) + "\n"
