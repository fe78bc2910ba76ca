"""Build the Document of one run's report from its bundle, summary and figures.

Section order is the reader's: Advice first (what to change), then whether the measurement
can be trusted, the headline, latency, throughput, the KV cache and its effect on latency,
and the detail. Every figure comes from `summarize` (the same dict as summary.json), so the
report never computes a number the summary does not have.
"""

from __future__ import annotations

import time
from typing import Any

from harness.advisor.record import Advice
from harness.formatting import DASH, ms_cell, num, pct
from harness.report.advice import advice_blocks
from harness.report.document import Bullets, Document, Image, Para, Table
from harness.report.server_timing import add_server_timing, source_sentence

LATENCY_ROWS = (
    ("ttft", "TTFT"),
    ("itl", "ITL (per-request mean)"),
    ("tpot", "TPOT"),
    ("e2e", "E2E"),
    ("itl_pooled", "ITL pooled (every gap; vllm bench serve's ITL)"),
)


def _when(t: Any) -> str:
    if isinstance(t, (int, float)):
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    return str(t) if t else "?"


def dist_row(name: str, d: dict[str, Any]) -> list[str]:
    return [
        name,
        str(d["count"]),
        ms_cell(d["mean"]),
        ms_cell(d["p50"]),
        ms_cell(d["p90"]),
        ms_cell(d["p95"]),
        ms_cell(d["p99"]),
        ms_cell(d["max"]),
    ]


def _bunched(b: dict[str, Any]) -> str:
    share = b.get("bunched_share")
    return DASH if share is None else f"{pct(share)} of {b.get('gaps')} ({b.get('cause')})"


DIST_HEADERS = ["metric", "n", "mean ms", "p50 ms", "p90 ms", "p95 ms", "p99 ms", "max ms"]


def run_document(
    s: dict[str, Any],
    figures: dict[str, str],
    advice_markdown: str | None,
    advice: Advice | None,
) -> Document:
    info = s["run"]
    load = f"rate {info['rate']}/s" if info.get("rate") else f"{info.get('users') or '?'} users"
    doc = Document(
        f"kvscope report: {info.get('workload') or 'run'} on {info.get('model') or 'unknown model'}",
        [
            f"target {info.get('target') or '?'} · {load} · started {_when(info.get('start'))}",
            f"bundle {info.get('path') or '?'}",
        ],
    )
    doc.section("Advice").blocks += advice_blocks(advice_markdown, advice)

    check = s["selfcheck"]
    sec = doc.section("Measurement self-check")
    if s["reliable"]:
        sec.blocks.append(
            Para("Reliable: the client kept up (no sign it distorted the numbers).", strong=True)
        )
    else:
        sec.blocks += [
            Para("UNRELIABLE: the client distorted these numbers.", strong=True),
            Bullets(check["reasons"]),
        ]
    sec.blocks.append(
        Table(
            ["check", "value"],
            [
                ["method", check["method"]],
                ["client delay floor (network + parsing)", f"{ms_cell(check['delay_floor_s'])} ms"],
                [
                    "client lag p50 / p99 (above the floor)",
                    f"{ms_cell(check['lag_p50_s'])} / {ms_cell(check['lag_p99_s'])} ms",
                ],
                ["TTFT p99 moved by the client", f"{ms_cell(check['ttft_p99_distortion_s'])} ms"],
                ["E2E p99 moved by the client", f"{ms_cell(check['e2e_p99_distortion_s'])} ms"],
                ["open-loop schedule lag p99", f"{ms_cell(check['schedule_lag_p99_s'])} ms"],
                ["load-generator CPU warnings", str(len(check["cpu_warnings"]))],
                ["inter-token gaps under 1 ms (bunched; cause)", _bunched(check.get("bunching") or {})],
            ],
        )
    )
    if check["notes"]:
        sec.blocks.append(Bullets(check["notes"]))
    if info.get("notes") or info.get("status") not in (None, "completed"):
        sec.blocks.append(Para(f"Run status: {info.get('status') or '?'}; the harness noted:"))
        sec.blocks.append(Bullets(info.get("notes") or ["(nothing)"]))

    doc.section("Summary").blocks.append(Bullets(s["verdicts"]))

    lat = doc.section("Latency")
    lat.blocks.append(
        Table(
            DIST_HEADERS,
            [dist_row(label, s["latency"][k]) for k, label in LATENCY_ROWS],
            "successful requests; ITL = each request's mean gap between tokens, as AIPerf and GuideLLM "
            "report it; TPOT = (E2E - TTFT) / (output tokens per choice - 1); the pooled row puts every "
            "gap of every request in one distribution",
        )
    )
    if "latency_cdf" in figures:
        lat.blocks.append(Image(figures["latency_cdf"], "latency CDFs"))

    tp, g = s["throughput"], s["goodput"]
    sec = doc.section("Throughput and goodput")
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
    sec.blocks.append(Table(["quantity", "value"], rows))
    if "throughput" in figures:
        sec.blocks.append(Image(figures["throughput"], "throughput over time"))

    srv = s["server"]
    sec = doc.section("Server and KV cache")
    if srv["samples"]:
        sec.blocks.append(
            Table(
                ["quantity", "value"],
                [
                    ["model (as the server names it)", str(srv["model"])],
                    [
                        "KV capacity",
                        f"{num(srv['kv_capacity_tokens'], 0)} tokens "
                        f"({num(srv['kv_capacity_blocks'], 0)} blocks)",
                    ],
                    [
                        "KV usage mean / p95 / max",
                        " / ".join(
                            pct(srv[k])
                            for k in ("mean_kv_usage_ratio", "p95_kv_usage_ratio", "peak_kv_usage_ratio")
                        ),
                    ],
                    ["time with KV usage ≥ 90%", f"{num(srv['time_above_90pct_s'], 0)} s"],
                    ["prefix-cache hit ratio (run)", pct(srv["prefix_hit_ratio"])],
                    [
                        "preemptions (run) / per second",
                        f"{num(srv['preemptions'], 0)} / {num(srv['preemptions_per_s'], 3)}",
                    ],
                    [
                        "running max / waiting max / waiting mean",
                        f"{num(srv['peak_requests_running'], 0)} / {num(srv['peak_requests_waiting'], 0)}"
                        f" / {num(srv['mean_requests_waiting'], 1)}",
                    ],
                ],
            )
        )
        if "server_timeline" in figures:
            sec.blocks.append(
                Image(figures["server_timeline"], "KV usage, queue and preemptions over time with TTFT")
            )
    else:
        sec.blocks.append(
            Para("No server samples were recorded (the exporter did not run or the target was down).")
        )

    sec = doc.section("Preemptions and latency")
    pre = s["preemption"]
    sec.blocks.append(Para(pre["verdict"], strong=pre.get("onset_unix") is not None))
    if pre.get("onset_unix") is not None:
        sec.blocks.append(
            Table(
                ["requests sent", "n", "TTFT p50 ms", "TTFT p99 ms", "E2E p99 ms"],
                [
                    [
                        "before preemptions began",
                        str(pre["before"]["count"]),
                        ms_cell(pre["before"]["p50"]),
                        ms_cell(pre["before"]["p99"]),
                        ms_cell(pre["e2e_before"]["p99"]),
                    ],
                    [
                        "after",
                        str(pre["after"]["count"]),
                        ms_cell(pre["after"]["p50"]),
                        ms_cell(pre["after"]["p99"]),
                        ms_cell(pre["e2e_after"]["p99"]),
                    ],
                ],
                f"onset: first sample whose preemption counter increased, {_when(pre['onset_unix'])}",
            )
        )

    if s["kv_bands"]:
        sec = doc.section("Latency by KV usage at send time")
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

    cs = s["client_server"]
    if cs["available"]:
        doc.section("Client vs server timing").blocks.append(
            Table(
                DIST_HEADERS,
                [
                    dist_row("client TTFT - server TTFT", cs["ttft_overhead"]),
                    dist_row("client E2E - server E2E", cs["e2e_overhead"]),
                    dist_row("server queue time", cs["server_queue"]),
                    dist_row("TTFT, preempted requests", cs["ttft_preempted"]),
                    dist_row("TTFT, never preempted", cs["ttft_not_preempted"]),
                ],
                "per request, from the server's own timings; median queue share of TTFT "
                f"{pct(cs['queue_share_of_ttft_median'])}. {source_sentence(s.get('server_split') or {})}",
            )
        )
    add_server_timing(doc, s)

    err = s["errors"]
    sec = doc.section("Errors")
    if err["failed"]:
        sec.blocks.append(
            Table(
                ["error class", "requests", "example message"],
                [[k, str(v), err["examples"].get(k, "")] for k, v in err["by_class"].items()],
                f"{err['failed']} of {err['total']} failed ({pct(err['error_rate'])})",
            )
        )
    else:
        sec.blocks.append(Para(f"No errors in {err['total']} requests."))

    ln = s["lengths"]
    doc.section("Request lengths").blocks.append(
        Table(
            DIST_HEADERS[:2] + ["mean", "p50", "p90", "p99", "max"],
            [
                [
                    name,
                    str(d["count"]),
                    num(d["mean"], 1),
                    num(d["p50"], 0),
                    num(d["p90"], 0),
                    num(d["p99"], 0),
                    num(d["max"], 0),
                ]
                for name, d in (
                    ("prompt tokens", ln["prompt_tokens"]),
                    ("output tokens", ln["output_tokens"]),
                )
            ],
            f"achieved / target, median: prompt {num(ln.get('prompt_median_ratio'))}, "
            f"output {num(ln.get('output_median_ratio'))}; "
            f"token counts from: {', '.join(f'{k} {v}' for k, v in ln['usage_sources'].items()) or '–'}",
        )
    )
    return doc
