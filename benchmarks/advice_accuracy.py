"""How accurate is the advice? The verify loop (`kvscope run --verify`) on a fixed set of cases:
each run, its verdicts applied to the server as its own flags and rerun (plus one rerun of the
unchanged configuration for the noise), and each replay's prediction held against what the
rerun measured.

Cases: the bundled engine (SmolLM2-135M on CPU) under three workloads, each with a pool small
enough to preempt (shared prefix, chat, long context), and a real vLLM (0.32's CPU build, from
scripts/setup_vllm.sh) with a 10-block pool under a shared-prefix load, started by
`kvscope run --serve`, with its OTLP spans and KV events.

Usage: python -m benchmarks.advice_accuracy [--cases bundled_shared_prefix,...] [--duration 45s] [--out DIR]

Prints, per case and verdict, predicted against measured (preemptions, TTFT p99, prefix hit
ratio) with the status, then per verdict kind and engine the mean absolute error.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.kept_table import ROOT, emit

METRICS = (("preemptions", "{:.0f}"), ("ttft_p99_s", "{:.2f} s"), ("prefix_hit_ratio", "{:.1%}"))
VLLM_ENV = (
    "VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 "
    "TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_DO_NOT_TRACK=1"
)
VLLM_PORT, EVENTS_PORT = 18300, 18357


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    engine: str
    workload: str
    args: tuple[str, ...]


def _vllm_model() -> Path:
    cache = os.environ.get("KVSCOPE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvscope"
    )
    return Path(cache) / "models" / "smollm2-135m-instruct-hf"


def _vllm_args() -> tuple[str, ...]:
    events = json.dumps(
        {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            # vLLM binds an endpoint whose host is `*` and connects to any other: it must bind here.
            "endpoint": f"tcp://*:{EVENTS_PORT}",
            "replay_endpoint": f"tcp://*:{EVENTS_PORT + 1}",
        }
    )
    python = ROOT / ".venv-vllm" / "bin" / "python"
    serve = (
        f"{VLLM_ENV} {shlex.quote(str(python))} -m vllm.entrypoints.openai.api_server "
        f"--model {shlex.quote(str(_vllm_model()))} --host 127.0.0.1 --port {VLLM_PORT} --dtype bfloat16 "
        f"--max-model-len 1024 --served-model-name smollm2 --num-gpu-blocks-override 10 "
        f"--kv-events-config {shlex.quote(events)}"
    )
    return (
        "--serve", serve, "--startup-timeout", "600", "--otlp",
        "--kv-events", f"tcp://127.0.0.1:{EVENTS_PORT},replay=tcp://127.0.0.1:{EVENTS_PORT + 1}",
        "--users", "8", "--num-prefixes", "4", "--prefix-tokens", "192", "--suffix-tokens", "32",
        "--output-tokens", "48",
    )  # fmt: skip


def cases() -> list[Case]:
    smol = ("--model", "smollm2-135m")
    return [
        Case(
            "bundled_shared_prefix", "bundled", "shared_prefix",
            (*smol, "--num-blocks", "64", "--users", "6", "--num-prefixes", "4", "--prefix-tokens", "192",
             "--suffix-tokens", "32", "--output-tokens", "48"),
        ),
        Case(
            "bundled_chat", "bundled", "chat",
            (*smol, "--num-blocks", "40", "--users", "6", "--max-prompt-tokens", "256",
             "--max-output-tokens", "96"),
        ),
        Case(
            "bundled_long_context", "bundled", "long_context",
            (*smol, "--num-blocks", "64", "--users", "4", "--prompt-tokens", "384", "--output-tokens", "48"),
        ),
        Case("vllm_shared_prefix", "vllm", "shared_prefix", _vllm_args()),
    ]  # fmt: skip


def run_case(case: Case, out: Path, duration: str) -> tuple[dict | None, str]:
    """(advice.json with its checks, why not)."""
    if case.engine == "vllm" and not (_vllm_model() / "config.json").is_file():
        return None, "vLLM is not set up: run scripts/setup_vllm.sh"
    argv = [sys.executable, "-m", "harness.cli", "run", "--quiet", "--verify", "--workload", case.workload,
            "--duration", duration, "--drain-timeout", "60", *case.args, "--out", str(out)]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=5400)
    (out.parent / f"{case.name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0 or not (out / "advice.json").exists():
        return None, f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
    return json.loads((out / "advice.json").read_text()), ""


def kind(verdict: dict) -> str:
    curve = verdict["action"] == "add_memory" and "hit_ratio" in (verdict.get("projected") or {})
    return "add_memory (miss-ratio curve)" if curve else verdict["action"]


def _cell(value, pattern: str) -> str:
    return "n/a" if value is None else pattern.format(value)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--duration", default="45s", help="each run's and rerun's duration (default 45s)")
    p.add_argument("--out", type=Path, help="keep the bundles here (default: a temporary folder)")
    p.add_argument(
        "--write", action="store_true", help="also keep the tables in benchmarks/advice_accuracy.md"
    )
    args = p.parse_args()
    base = args.out or Path(tempfile.mkdtemp(prefix="kvscope-accuracy-"))
    chosen = [c for c in cases() if not args.cases or c.name in args.cases.split(",")]
    rows, errors, failures, misses = [], {}, [], []
    for case in chosen:
        started = time.monotonic()
        advice, why = run_case(case, base / case.name, args.duration)
        if advice is None:
            failures.append(f"- {case.name}: {why}")
            continue
        for v in advice["verdicts"]:
            c = v.get("check") or {}
            measured, predicted = c.get("measured") or {}, c.get("predicted") or {}
            cells = []
            for metric, pattern in METRICS:
                pv, mv = predicted.get(metric), measured.get(metric)
                cells.append(f"{_cell(pv, pattern)} / {_cell(mv, pattern)}")
                if pv is not None and mv is not None:
                    errors.setdefault((kind(v), case.engine, metric), []).append(abs(pv - mv))
            noise = (c.get("noise") or {}).get(c.get("decided_by") or "", None)
            reason = (c.get("reason") or {}).get("text", "") if c.get("status") == "not applicable" else ""
            flags = " ".join((c.get("change") or {}).get("flags") or []) or "-"
            status = c.get("status", "not checked") + (f": {reason}" if reason else "")
            decided = f"{c.get('decided_by') or '-'} ± {_cell(noise, '{:.3g}')}"
            wall = f"{time.monotonic() - started:.0f} s"
            rows.append(
                f"| {case.name} | {kind(v)} | {flags} | {' | '.join(cells)} | {status} | {decided} | {wall} |"
            )
            misses += [
                f"- {case.name}, {kind(v)}, {m['subject']}: predicted {m['predicted']:.3g}, measured "
                f"{m['measured']:.3g}: {m['text']} (`{m['code']}`)"
                for m in c.get("misses") or []
            ]
    out = [f"Each run and rerun {args.duration}; predicted / measured (the rerun with the change).", ""]
    out += [
        "| case | verdict | flags applied | preemptions | TTFT p99 | prefix hit ratio | status | "
        "decided by ± noise | case wall |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Mean absolute error, predicted against measured, per verdict kind and engine:",
        "",
        "| verdict | engine | checks | preemptions | TTFT p99 | prefix hit ratio |",
        "|---|---|---|---|---|---|",
    ]
    for k, e in sorted({(k, e) for k, e, _ in errors}):
        cells = []
        for metric, pattern in METRICS:
            values = errors.get((k, e, metric), [])
            cells.append(_cell(sum(values) / len(values), pattern) if values else "n/a")
        n = max(len(errors.get((k, e, m), [])) for m, _ in METRICS)
        out.append(f"| {k} | {e} | {n} | " + " | ".join(cells) + " |")
    if misses:
        head = "Predictions off by over 30% (the hit ratio: by over 5 points), with the likeliest cause:"
        out += ["", head, "", *misses]
    if failures:
        out += ["", "Cases that did not run:", "", *failures]
    command = f"python -m benchmarks.advice_accuracy --duration {args.duration}" + (
        f" --cases {args.cases}" if args.cases else ""
    )
    emit("\n".join(out), "advice_accuracy", command, args.write)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
