"""The summary `kvscope run` prints when the bundle is written (figures from summary.json)."""

from __future__ import annotations

from pathlib import Path


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:.0f} ms"


def print_summary(summary: dict, out: Path) -> None:
    c, s = summary["client"], summary["server"]
    errors = ", ".join(f"{k} {v}" for k, v in c["errors_by_class"].items()) or "none"
    kv = s.get("peak_kv_usage_ratio")
    hit = s.get("prefix_hit_ratio")
    print(
        f"\nrequests: {c['ok']} ok, {c['failed']} failed ({errors})\n"
        f"throughput: {c['req_per_s']:.2f} req/s, {c['output_tok_per_s']:.1f} output tok/s\n"
        f"TTFT p50 {_ms(c['ttft_s']['p50'])} p99 {_ms(c['ttft_s']['p99'])} | ITL p50 {_ms(c['itl_s']['p50'])} "
        f"p99 {_ms(c['itl_s']['p99'])} | E2E p50 {_ms(c['e2e_s']['p50'])} p99 {_ms(c['e2e_s']['p99'])}\n"
        f"server: peak KV usage {'-' if kv is None else f'{kv:.1%}'}, preemptions {s.get('preemptions', '-')}, "
        f"prefix hit ratio {'-' if hit is None else f'{hit:.1%}'}\n"
        f"bundle: {out}"
    )
