"""The headline figures of a run: the single source of truth for summary.json.

`summarize(bundle, slos)` is a pure function of the bundle; `write_summary(dir)` is what
`kvscope run` (and `kvscope report`) call to (re)write `summary.json`, so the file on disk,
the report and the sweep table always agree. Invariants:
- JSON-safe: no NaN/inf (None instead), plain Python numbers, stable keys.
- SLOs come from the argument, else from run.json (`slo`, at the top or under `config`).
- Server figures cover the measurement window only (see `server.clip_to_window`).
- `headline` (a dict) and `client` keep the keys of the harness's first summary.json
  (req_per_s, ttft_p99_s, client.ok, client.errors_by_class, ...), so `kvscope run`, its
  printout and anything reading those keys work unchanged; `verdicts` holds the sentences.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from harness.analysis.join import analyse_join
from harness.analysis.latency import analyse_latency, window_bounds
from harness.analysis.selfcheck import self_check
from harness.analysis.server import clip_to_window, summarise_server, timeline
from harness.analysis.server_split import server_split
from harness.analysis.sessions import session_summary
from harness.analysis.slo import Slos, parse_slos
from harness.analysis.stats import distribution
from harness.bundle.finding import read_findings, texts
from harness.bundle.jsonfile import json_safe, write_json
from harness.bundle.read import Bundle, measured, read_bundle
from harness.bundle.schema import SUMMARY
from harness.formatting import ms

SCHEMA = "kvscope.summary/1"
# itl: per-request mean inter-token latency (the headline); itl_pooled: every gap in one
# distribution (vllm bench serve's ITL), kept as a second, labelled figure.
LATENCY_KEYS = ("ttft", "itl", "tpot", "e2e", "itl_pooled")
NA = "n/a"  # a figure the run did not measure, in the verdict sentences


def slos_from_run(run: dict[str, Any]) -> Slos:
    for holder in (run, run.get("config") or {}):
        text = holder.get("slo") if isinstance(holder, dict) else None
        if isinstance(text, str) and text.strip():
            try:
                return parse_slos(text)
            except ValueError:
                return Slos()
        if isinstance(text, dict) and text:
            return Slos(**{k: float(v) for k, v in text.items() if k in ("ttft", "tpot", "e2e", "itl")})
    return Slos()


def stated_model(run: dict[str, Any]) -> str | None:
    """The model id the server stated in /v1/models (run.json's deployment facts)."""
    engine = (run.get("deployment") or {}).get("engine") if isinstance(run.get("deployment"), dict) else None
    fact = engine.get("model") if isinstance(engine, dict) else None
    value = fact.get("value") if isinstance(fact, dict) else None
    return value if isinstance(value, str) and value else None


def run_info(run: dict[str, Any], bundle: Bundle) -> dict[str, Any]:
    """The run's identity for headers, read loosely (the harness owns run.json's layout)."""
    cfg = run.get("config") if isinstance(run.get("config"), dict) else {}
    req = bundle.requests
    # The server's own name first: with --simulate the configured --model is not what it serves;
    # a server whose metrics carry no model label (llama.cpp) names it in /v1/models.
    served = [str(m) for m in (bundle.server["model"].dropna() if len(bundle.server) else []) if m]
    model = served[0] if served else stated_model(run) or run.get("model") or cfg.get("model")
    workload = run.get("workload") or cfg.get("workload")
    if isinstance(workload, dict):
        workload = workload.get("name")
    if not workload and req["workload"].notna().any():
        workload = str(req["workload"].dropna().iloc[0])
    target = run.get("target") or cfg.get("target")
    if isinstance(target, dict):
        target = target.get("url") or target.get("name")
    return {
        "workload": workload,
        "model": model,
        "target": target,
        "users": cfg.get("users", run.get("users")),
        "rate": cfg.get("rate", run.get("rate")),
        "start": run.get("started_unix") or run.get("start"),
        "end": run.get("ended_unix") or run.get("end"),
        "status": run.get("status"),
        "notes": [n.to_dict() for n in read_findings(run.get("notes"))],
        "path": str(bundle.path) if bundle.path else None,
    }


def summarize(bundle: Bundle | str | Path, slos: Slos | str | None = None) -> dict[str, Any]:
    """Every headline figure of one run as a JSON-safe dict (see the module docstring)."""
    b = bundle if isinstance(bundle, Bundle) else read_bundle(bundle)
    s = parse_slos(slos) if isinstance(slos, str) else (slos if slos else slos_from_run(b.run))
    lat = analyse_latency(b.requests, s)
    req = measured(b.requests)
    server = clip_to_window(b.server, window_bounds(req))
    srv = summarise_server(server)
    tl = timeline(server)
    joined = analyse_join(b.requests, tl, srv.preemption_onset_unix)
    check = self_check(b.requests, server, b.run, b.client_log_warnings)
    out = {
        "schema": SCHEMA,
        "run": run_info(b.run, b),
        "slos": s.to_dict(),
        "reliable": check.reliable,
        "requests": {"total": len(req), "ok": int(req["ok"].sum()), "failed": int((~req["ok"]).sum())},
        "latency": {k: getattr(lat, k).to_dict() for k in LATENCY_KEYS},
        "throughput": lat.throughput.to_dict(),
        "goodput": lat.goodput.to_dict(),
        "errors": lat.errors.to_dict(),
        "lengths": {
            "prompt_tokens": lat.prompt_tokens.to_dict(),
            "output_tokens": lat.output_tokens.to_dict(),
            **lat.length_accuracy,
            "usage_sources": lat.usage_sources,
        },
        "server": srv.to_dict(),
        "kv_bands": [r.to_dict() for r in joined.kv_bands],
        "kv_band_verdict": joined.kv_band_verdict,
        "preemption": joined.preemption.to_dict(),
        "client_server": joined.client_server.to_dict(),
        "selfcheck": check.to_dict(),
        "server_split": server_split(b.requests, b.spans).to_dict(),
        "spans": b.run.get("spans"),  # the receiver's counts and the join's (bundle.spans), or None
        "sessions": session_summary(b),  # multi-turn and agentic runs (analysis.sessions), or None
    }
    out["client"] = client_block(b.requests, out)
    out["headline"] = headline_figures(out)
    out["verdicts"] = verdicts(out)
    return json_safe(out)


def client_block(all_requests, s: dict[str, Any]) -> dict[str, Any]:
    """The client figures under the names the harness's summary.json used first."""
    req = measured(all_requests)
    ok = req[req["ok"]]
    tp, lat = s["throughput"], s["latency"]
    return {
        "requests": len(req),
        "ok": len(ok),
        "failed": len(req) - len(ok),
        "errors_by_class": s["errors"]["by_class"],
        # sent again on a fresh connection after a stale keep-alive one (not failures)
        "retried": int(
            pd.to_numeric(req.get("retries", pd.Series(dtype=float)), errors="coerce").fillna(0).sum()
        ),
        "calibration_requests": len(all_requests) - len(req),
        "duplicate_request_ids": int(all_requests["request_id"].duplicated().sum()),
        "window_s": tp["window_s"] if len(req) else None,
        "req_per_s": tp["requests_per_s"],
        "output_tokens": int(ok["output_tokens"].fillna(0).sum()),
        "output_tok_per_s": tp["output_tokens_per_s"],
        **{f"{k}_s": lat[k] for k in LATENCY_KEYS},
        "client_overhead_ttft_s": s["client_server"]["ttft_overhead"],
        "schedule_lag_s": distribution(req["schedule_lag_s"].to_numpy(float)).to_dict(),
        "usage_source": {
            str(k): int(v) for k, v in req["usage_source"].fillna("none").value_counts().items()
        },
        "server_preemptions_seen_by_requests": int(
            pd.to_numeric(ok["server_num_preemptions"], errors="coerce").fillna(0).sum()
        ),
    }


def headline_figures(s: dict[str, Any]) -> dict[str, Any]:
    """The short list people quote (keys as the harness's first summary.json, plus TPOT,
    goodput and the self-check verdict)."""
    c, srv = s["client"], s["server"]
    out = {
        "requests_ok": c["ok"],
        "requests_failed": c["failed"],
        "errors_by_class": c["errors_by_class"],
        "req_per_s": c["req_per_s"],
        "output_tok_per_s": c["output_tok_per_s"],
    }
    for m in ("ttft", "itl", "tpot", "e2e"):
        out.update({f"{m}_{p}_s": s["latency"][m][p] for p in ("p50", "p99")})
    out["itl_mean_s"] = s["latency"]["itl"]["mean"]
    out["itl_pooled_p50_s"] = s["latency"]["itl_pooled"]["p50"]
    out.update(
        {
            "peak_kv_usage_ratio": srv["peak_kv_usage_ratio"],
            "preemptions": srv["preemptions"],
            "prefix_hit_ratio": srv["prefix_hit_ratio"],
            "goodput_req_per_s": s["goodput"]["requests_per_s"] if s["slos"] else None,
            "reliable": s["reliable"],
        }
    )
    return out


def verdicts(s: dict[str, Any]) -> list[str]:
    """A few sentences a serving engineer reads first."""
    lat, tp, srv = s["latency"], s["throughput"], s["server"]
    lines = [
        f"{s['requests']['ok']} of {s['requests']['total']} requests succeeded; "
        f"{tp['requests_per_s']:.2f} req/s, {tp['output_tokens_per_s']:.1f} output tok/s "
        f"over {tp['window_s']:.1f} s.",
        f"TTFT p50 {ms(lat['ttft']['p50'], missing=NA)}, p99 {ms(lat['ttft']['p99'], missing=NA)}; "
        f"TPOT p50 {ms(lat['tpot']['p50'], missing=NA)}, "
        f"p99 {ms(lat['tpot']['p99'], missing=NA)}; "
        f"ITL (per-request mean) {ms(lat['itl']['mean'], missing=NA)}; "
        + f"E2E p99 {ms(lat['e2e']['p99'], missing=NA)}.",
    ]
    if s["slos"]:
        g = s["goodput"]
        att = "n/a" if g["attainment"] is None else f"{g['attainment']:.0%}"
        lines.append(f"Goodput {g['requests_per_s']:.2f} req/s: {att} of requests met every SLO.")
    if srv.get("peak_kv_usage_ratio") is not None:
        lines.append(
            f"KV usage peaked at {srv['peak_kv_usage_ratio']:.0%} (mean {srv['mean_kv_usage_ratio']:.0%}); "
            f"{srv['preemptions'] or 0:.0f} preemptions."
        )
    if s["kv_band_verdict"]:
        lines.append(s["kv_band_verdict"])
    if s["preemption"].get("onset_unix") is not None:
        lines.append(s["preemption"]["verdict"])
    if (s.get("sessions") or {}).get("verdict"):
        lines.append(s["sessions"]["verdict"])
    if not s["reliable"]:
        lines.append("UNRELIABLE: " + "; ".join(texts(s["selfcheck"]["reasons"])))
    return lines


def write_summary(bundle_dir: str | Path, slos: Slos | str | None = None) -> dict[str, Any]:
    """Compute the summary of the bundle in `bundle_dir` and write it to summary.json."""
    summary = summarize(read_bundle(bundle_dir), slos)
    write_json(Path(bundle_dir) / SUMMARY, summary)
    return summary
