"""The run report's latency sections: the headline sentences, the latency percentiles and
CDFs, throughput and goodput, latency before and after preemptions began, and latency by
the KV usage a request was sent into. Each is one function of the `RunReport`."""

from __future__ import annotations

from harness.formatting import ms_cell, num, pct
from harness.report.cells import DIST_HEADERS, dist_row, when
from harness.report.document import Bullets, Image, Para, Section, Table
from harness.report.run_report import RunReport

LATENCY_ROWS = (
    ("ttft", "TTFT"),
    ("itl", "ITL (per-request mean)"),
    ("tpot", "TPOT"),
    ("e2e", "E2E"),
    ("itl_pooled", "ITL pooled (every gap; vllm bench serve's ITL)"),
)


def summary_section(r: RunReport) -> Section:
    return Section("Summary", [Bullets(r.summary["verdicts"])])


def latency_section(r: RunReport) -> Section:
    sec = Section("Latency")
    sec.blocks.append(
        Table(
            DIST_HEADERS,
            [dist_row(label, r.summary["latency"][k]) for k, label in LATENCY_ROWS],
            "successful requests; ITL = each request's mean gap between tokens, as AIPerf and GuideLLM "
            "report it; TPOT = (E2E - TTFT) / (output tokens per choice - 1); the pooled row puts every "
            "gap of every request in one distribution",
        )
    )
    if "latency_cdf" in r.figures:
        sec.blocks.append(Image(r.figures["latency_cdf"], "latency CDFs"))
    return sec


def throughput_section(r: RunReport) -> Section:
    s = r.summary
    tp, g = s["throughput"], s["goodput"]
    rows = [
        ["window (first send to last completion)", f"{num(tp['window_s'], 1)} s"],
        ["requests/s (successful)", num(tp["requests_per_s"])],
        ["output tokens/s", num(tp["output_tokens_per_s"], 1)],
        ["prompt tokens/s", num(tp["prompt_tokens_per_s"], 1)],
    ]
    if s["slos"]:
        rows += [
            ["SLOs", ", ".join(f"{k} ≤ {v * 1000:g} ms" for k, v in s["slos"].items())],
            ["goodput (requests/s meeting every SLO)", num(g["requests_per_s"])],
            ["SLO attainment", f"{pct(g['attainment'])} ({g['requests_meeting']} of {g['requests_total']})"],
        ]
    sec = Section("Throughput and goodput", [Table(["quantity", "value"], rows)])
    if "throughput" in r.figures:
        sec.blocks.append(Image(r.figures["throughput"], "throughput over time"))
    return sec


def preemption_section(r: RunReport) -> Section:
    pre = r.summary["preemption"]
    sec = Section("Preemptions and latency", [Para(pre["verdict"], strong=pre.get("onset_unix") is not None)])
    if pre.get("onset_unix") is None:
        return sec
    sides = (("before preemptions began", "before", "e2e_before"), ("after", "after", "e2e_after"))
    sec.blocks.append(
        Table(
            ["requests sent", "n", "TTFT p50 ms", "TTFT p99 ms", "E2E p99 ms"],
            [
                [
                    label,
                    str(pre[side]["count"]),
                    ms_cell(pre[side]["p50"]),
                    ms_cell(pre[side]["p99"]),
                    ms_cell(pre[e2e]["p99"]),
                ]
                for label, side, e2e in sides
            ],
            f"onset: first sample whose preemption counter increased, {when(pre['onset_unix'])}",
        )
    )
    return sec


def kv_band_section(r: RunReport) -> Section | None:
    s = r.summary
    if not s["kv_bands"]:
        return None
    sec = Section("Latency by KV usage at send time")
    if s["kv_band_verdict"]:
        sec.blocks.append(Para(s["kv_band_verdict"], strong=True))
    sec.blocks.append(
        Table(
            ["KV usage", "requests", "failed", "TTFT p50 ms", "TTFT p99 ms", "TPOT p99 ms", "E2E p99 ms"],
            [
                [
                    b["band"],
                    str(b["requests"]),
                    str(b["failed"]),
                    ms_cell(b["ttft"]["p50"]),
                    ms_cell(b["ttft"]["p99"]),
                    ms_cell(b["tpot"]["p99"]),
                    ms_cell(b["e2e"]["p99"]),
                ]
                for b in s["kv_bands"]
            ],
            "each request joined to the last server sample at or before its send (merge_asof)",
        )
    )
    return sec
