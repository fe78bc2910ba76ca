"""The run report's server sections: the server and its KV cache over the run, and the
client's timings against the server's own (the server-side split is in server_timing)."""

from __future__ import annotations

from harness.formatting import num, pct
from harness.report.cells import DIST_HEADERS, dist_row
from harness.report.document import Image, Para, Section, Table
from harness.report.run_report import RunReport
from harness.report.server_timing import source_sentence

NO_SAMPLES = "No server samples were recorded (the exporter did not run or the target was down)."


def server_section(r: RunReport) -> Section:
    srv = r.summary["server"]
    sec = Section("Server and KV cache")
    if not srv["samples"]:
        sec.blocks.append(Para(NO_SAMPLES))
        return sec
    usage = ("mean_kv_usage_ratio", "p95_kv_usage_ratio", "peak_kv_usage_ratio")
    rows = [
        ["model (as the server names it)", str(srv["model"])],
        [
            "KV capacity",
            f"{num(srv['kv_capacity_tokens'], 0)} tokens ({num(srv['kv_capacity_blocks'], 0)} blocks)",
        ],
        ["KV usage mean / p95 / max", " / ".join(pct(srv[k]) for k in usage)],
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
    ]
    sec.blocks.append(Table(["quantity", "value"], rows))
    if "server_timeline" in r.figures:
        sec.blocks.append(
            Image(r.figures["server_timeline"], "KV usage, queue and preemptions over time with TTFT")
        )
    return sec


def client_server_section(r: RunReport) -> Section | None:
    s = r.summary
    cs = s["client_server"]
    if not cs["available"]:
        return None
    table = Table(
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
    return Section("Client vs server timing", [table])
