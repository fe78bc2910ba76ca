"""The summary `kvscope run` prints when the bundle is written (figures from summary.json)."""

from __future__ import annotations

from pathlib import Path

from harness.formatting import ms


def print_summary(summary: dict, out: Path) -> None:
    c, s = summary["client"], summary["server"]
    errors = ", ".join(f"{k} {v}" for k, v in c["errors_by_class"].items()) or "none"
    kv = s.get("peak_kv_usage_ratio")
    hit = s.get("prefix_hit_ratio")
    print(
        f"\nrequests: {c['ok']} ok, {c['failed']} failed ({errors})"
        f"{f', {retried} retried on a fresh connection' if (retried := c.get('retried')) else ''}\n"
        f"throughput: {c['req_per_s']:.2f} req/s, {c['output_tok_per_s']:.1f} output tok/s\n"
        f"TTFT p50 {ms(c['ttft_s']['p50'])} p99 {ms(c['ttft_s']['p99'])} | ITL p50 {ms(c['itl_s']['p50'])} "
        f"p99 {ms(c['itl_s']['p99'])} | E2E p50 {ms(c['e2e_s']['p50'])} p99 {ms(c['e2e_s']['p99'])}\n"
        f"server: peak KV usage {'-' if kv is None else f'{kv:.1%}'}, "
        f"preemptions {'-' if s.get('preemptions') is None else s['preemptions']}, "
        f"prefix hit ratio {'-' if hit is None else f'{hit:.1%}'}\n"
        f"bundle: {out}"
    )
