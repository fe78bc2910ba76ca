"""The Advice section, built from an `Advice` (what advice.json holds) into report blocks.

First how much KV pressure the run showed and how well the replay of the unchanged
configuration reproduced it; then one sub-heading per verdict, verified ones first (the
order advice.json already has): its status, the projected effect, what its replays measured
and the evidence as a table of named quantities with units. Then the facts the advice
lacks and, under "Also checked", the rules that were considered and did not fire, so an
empty advice is still an explanation. `advice_markdown` is the same section as Markdown
(advice.json's `markdown`, what `kvscope advise` prints).
"""

from __future__ import annotations

from typing import Any

from harness.advisor.check_text import check_line
from harness.advisor.evidence_table import evidence_rows
from harness.advisor.record import Advice, Verdict
from harness.bundle.finding import Finding
from harness.report.document import Block, Bullets, Heading, Para, Section, Table
from harness.report.markdown import section_markdown

TITLE = "Advice"
NO_ADVICE = "No advice yet: run `kvscope advise` on this folder to fill this section."
NO_CHANGE = "No change advised: the KV cache is not under pressure in this run."
STATUS = {
    "verified": "verified by replay",
    "indicative": "indicative: the replay shows the gain, but its baseline misses the run",
    "not confirmed": "not confirmed by replay",
}
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


def pressure_line(diag: dict[str, Any]) -> str:
    return (
        f"KV pressure: {'yes' if diag.get('kv_pressure') else 'no'} (preemption level "
        f"{diag.get('preemption_level')}, {_fmt(diag.get('preemptions_per_finished'), '{:.3g}')} "
        f"preemptions per finished request, {_fmt(diag.get('preemptions_per_minute'), '{:.3g}')} per "
        f"minute; KV saturated {_fmt(diag.get('saturated_share'), '{:.0%}')} of the time; requests "
        f"waiting {_fmt(diag.get('waiting_share'), '{:.0%}')} of the time, "
        f"{_fmt(diag.get('waiting_kv_blocked_share'), '{:.0%}')} for want of free KV blocks)."
    )


def _why(replay: dict[str, Any]) -> str:
    return Finding.from_json(replay.get("why") or "").text


def verdict_blocks(number: int, v: Verdict) -> list[Block]:
    items = [f"Effect: {v.effect}"]
    if v.replay:
        label = v.replay["change"].get("label")
        items.append(f"Replay of {label}, {_why(v.replay)}: {replay_line(v.replay)}")
    items += [
        f"Also replayed {alt['change'].get('label')}, {_why(alt)}: {replay_line(alt)}"
        for alt in v.alternatives
    ]
    if v.status == "indicative" and v.status_reason:
        items.append(f"Why indicative: {v.status_reason.text}")
    if v.check:
        items.append(f"Checked on the server: {check_line(v.action, v.check)}")
    options = v.evidence.get("options")
    if options:
        items.append(
            "Options: "
            + "; ".join(
                f"{o['option']} ({o['gpus']} GPUs, {o['total_memory_gib']} GiB)"
                if o.get("total_memory_gib")
                else o["option"]
                for o in options
            )
        )
    blocks: list[Block] = [
        Heading(f"{number}. {v.title} ({v.action}, {STATUS.get(v.status, 'not replayed')})"),
        Bullets(items),
    ]
    rows = evidence_rows(v.evidence)
    if rows:
        blocks.append(Table(["quantity", "value"], [list(r) for r in rows], "evidence"))
    return blocks


def advice_blocks(advice: Advice | None) -> list[Block]:
    if advice is None:
        return [Para(NO_ADVICE)]
    blocks: list[Block] = []
    if advice.diagnosis:
        blocks.append(Para(pressure_line(advice.diagnosis)))
    if advice.fidelity:
        blocks.append(Para(fidelity_line(advice.fidelity)))
    if not advice.verdicts:
        blocks.append(Para(NO_CHANGE))
    for i, v in enumerate(advice.verdicts, 1):
        blocks += verdict_blocks(i, v)
    if advice.missing_facts:
        blocks += [
            Para("Facts the advice lacks (no source stated them; nothing was assumed):"),
            Bullets(
                [
                    f"{m['fact']}, for {', '.join(m['needed_for'])}: state it with {m['supply']}"
                    for m in advice.missing_facts
                ]
            ),
        ]
    if advice.notes:
        blocks += [Para("Also checked:"), Bullets([n.text for n in advice.notes])]
    if advice.time_axis:
        blocks.append(
            Para(f"Replays run the run's own requests on the simulator; time axis {advice.time_axis}.")
        )
    return blocks


def advice_section(advice: Advice | None) -> Section:
    return Section(TITLE, advice_blocks(advice))


def advice_markdown(advice: Advice) -> str:
    """The Advice section as Markdown, from the same blocks as the report's."""
    return section_markdown(advice_section(advice))
