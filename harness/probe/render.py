"""A probe's result for people: the console's summary and table, and probe.md.

Invariant: both are built from the `ProbeResult` alone (so `kvscope probe BUNDLE` and a
live probe print alike, and probe.md matches probe.json)."""

from __future__ import annotations

from harness.probe.capacity import ConcurrencyRow
from harness.probe.result import ProbeResult

DASH = "-"


def _n(x: float | None, digits: int = 0) -> str:
    if x is None:
        return DASH
    if abs(x - round(x)) < 1e-6:
        return f"{round(x):,}"
    return f"{x:,.{max(digits, 1)}f}"


def summary_lines(r: ProbeResult) -> list[str]:
    fit, st = r.fit, r.stated
    per_block = (
        f"{_n(fit.tokens_per_block, 2)} tokens per block"
        if fit.tokens_per_block
        else "tokens per block not measured"
    )
    lines = [
        f"measured: {per_block}, {_n(fit.fixed_blocks, 2)} fixed blocks per request, "
        f"{_n(fit.usable_blocks)} usable blocks ({fit.usable_blocks_source or 'unknown'})",
        f"capacity: {_n(fit.capacity_tokens, 1)} tokens for requests; stated {_n(st.capacity_tokens)}"
        + (f" ({st.capacity_source})" if st.capacity_source else ""),
    ]
    if st.slots:
        sizes = sorted(set(st.slots))
        each = f"{_n(sizes[0])} tokens" if len(sizes) == 1 else "/".join(_n(n) for n in st.slots) + " tokens"
        lines.append(
            f"slots: {len(st.slots)} x {each} ({st.slot_layout or 'per-slot'} pool): a request runs in one "
            "slot, which must hold all its tokens"
        )
    if fit.points:
        whole = (
            "not whole blocks"
            if not fit.whole_blocks
            else f"whole blocks: every point holds {_n(fit.fixed_blocks)}, a reservation"
            if not fit.tokens_per_block
            else f"whole blocks: every point is {_n(fit.fixed_blocks)} + ceil(tokens / "
            f"{_n(fit.tokens_per_block)})"
        )
        lines.append(
            f"fit: {len(fit.points)} points, residual rms {fit.rms_residual:.3g} {fit.residual_unit}, "
            f"max {fit.max_abs_residual:.3g} ({whole})"
        )
    return lines


TABLE_HEAD = ("length", "tokens", "blocks/request", "holds", "stated ÷ length", "server's figure")


def table_cells(row: ConcurrencyRow) -> list[str]:
    return [
        row.label,
        _n(row.tokens),
        _n(row.blocks_per_request, 1),
        _n(row.requests),
        _n(row.naive, 1),
        _n(row.server_figure, 2),
    ]


def console(r: ProbeResult) -> str:
    rows = [list(TABLE_HEAD)] + [table_cells(row) for row in r.concurrency]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_HEAD))]
    table = [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
        for row in rows
    ]
    found = [f"[{f.code}] {f.text}" for f in r.findings]
    return "\n".join([f"kvscope probe: {r.source}", *summary_lines(r), "", *table, "", *found])


def markdown(r: ProbeResult) -> str:
    fit = r.fit
    out = [f"# kvscope probe: {r.source}", "", *(f"- {line}" for line in summary_lines(r)), ""]
    out += ["## Concurrency the pool holds", ""]
    if r.lengths_source:
        out += [f"Lengths: {r.lengths_source}. Each row: prompt + output tokens per request.", ""]
    out += [
        "| " + " | ".join(TABLE_HEAD) + " |",
        "|" + "---|" * len(TABLE_HEAD),
        *("| " + " | ".join(table_cells(row)) + " |" for row in r.concurrency),
        "",
        "holds: requests of that length the pool holds at once at their peak (the pool's bound; "
        "max_num_seqs may bind first). stated ÷ length: the server's stated pool in tokens over the "
        "length, the arithmetic that assumes no block rounding and no fixed cost. server's figure: "
        "its start-up concurrency at max_model_len, where it states one.",
        "",
    ]
    if fit.points:
        out += [
            "## Fit",
            "",
            f"blocks = fixed + KV tokens / tokens per block; residuals in {fit.residual_unit}.",
            "",
        ]
        out += [
            "| prompt | output | KV tokens | usage | blocks | fitted | residual |",
            "|---|---|---|---|---|---|---|",
        ]
        out += [
            f"| {p.prompt_tokens} | {p.output_tokens} | {p.kv_tokens} | {p.usage:.4%} | {_n(p.blocks, 2)} | "
            f"{p.fitted:.2f} | {p.residual:+.3f} |"
            for p in fit.points
        ]
        out.append("")
    if r.findings:
        out += ["## Findings", "", *(f"- `{f.code}`: {f.text}" for f in r.findings), ""]
    return "\n".join(out)
