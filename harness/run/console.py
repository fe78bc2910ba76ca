"""The summary `kvscope run` prints when the bundle is written (figures from summary.json).

The self-check's verdict sits right under the latency headline, reasons included: a figure
the client distorted must not be read without the warning next to it. ITL is the
per-request mean (comparable with AIPerf and GuideLLM); the pooled distribution of every
gap follows on its own line, labelled, with the share of bunched gaps.
"""

from __future__ import annotations

from pathlib import Path

from harness.bundle.finding import texts
from harness.formatting import ms


def self_check_line(summary: dict) -> str:
    check = summary.get("selfcheck") or {}
    verdict = (
        "self-check: reliable (the client kept up)"
        if summary.get("reliable", True)
        else "self-check: UNRELIABLE: " + "; ".join(texts(check.get("reasons")) or ["see the report"])
    )
    return "\n".join([verdict, *(f"  note: {n}" for n in texts(check.get("notes")))])


def print_summary(summary: dict, out: Path) -> None:
    c, s = summary["client"], summary["server"]
    lat = summary["latency"]
    errors = ", ".join(f"{k} {v}" for k, v in c["errors_by_class"].items()) or "none"
    kv = s.get("peak_kv_usage_ratio")
    hit = s.get("prefix_hit_ratio")
    itl, pooled = lat["itl"], lat["itl_pooled"]

    def fine(seconds: float | None) -> str:
        return ms(seconds, fine_below_s=0.01)

    bunched = (summary.get("selfcheck") or {}).get("bunching", {}).get("bunched_share")
    print(
        f"\nrequests: {c['ok']} ok, {c['failed']} failed ({errors})"
        f"{f', {retried} retried on a fresh connection' if (retried := c.get('retried')) else ''}\n"
        f"throughput: {c['req_per_s']:.2f} req/s, {c['output_tok_per_s']:.1f} output tok/s\n"
        f"TTFT p50 {ms(c['ttft_s']['p50'])} p99 {ms(c['ttft_s']['p99'])} | "
        f"ITL {fine(itl['mean'])} (per-request mean; p99 {fine(itl['p99'])}) | "
        f"E2E p50 {ms(c['e2e_s']['p50'])} p99 {ms(c['e2e_s']['p99'])}\n"
        f"{self_check_line(summary)}\n"
        f"ITL pooled over every gap (vllm bench serve's ITL): p50 {fine(pooled['p50'])} "
        f"p99 {fine(pooled['p99'])}"
        + ("" if bunched is None else f"; {bunched:.0%} of gaps under 1 ms")
        + "\n"
        f"server: peak KV usage {'-' if kv is None else f'{kv:.1%}'}, "
        f"preemptions {'-' if s.get('preemptions') is None else s['preemptions']}, "
        f"prefix hit ratio {'-' if hit is None else f'{hit:.1%}'}\n"
        + spans_line(summary.get("spans"))
        + f"bundle: {out}",
        flush=True,  # before the stderr lines that follow, when both go to one pipe
    )


def spans_line(spans: dict | None) -> str:
    """With --otlp: how many requests were joined to a server span ('' without)."""
    if not spans:
        return ""
    join, receiver = spans.get("join") or {}, spans.get("receiver") or {}
    refused = sum(v for k, v in receiver.items() if k.startswith("bodies_") and isinstance(v, int))
    return (
        f"spans: {join.get('joined', 0)} of {join.get('ok_traced', 0)} successful requests joined "
        f"({join.get('missing', 0)} missing, {join.get('unknown_trace', 0)} unknown trace ids, "
        f"{receiver.get('spans_late', 0)} late, {refused} bodies refused)\n"
    )
