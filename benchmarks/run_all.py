"""Run the CPU benchmark set and rewrite benchmarks/RESULTS.md: `make bench`.

Usage: python -m benchmarks.run_all [--budget-s 840] [--only paper_memory,paper_sharing] [--out PATH]

With --only, the named benchmarks' sections are replaced and every other section of the
existing file is kept as it was (each carries its own machine line and date).

Each benchmark runs as its own subprocess with a timeout, in its own process group (so a
server it started goes down with it; SIGTERM, then SIGKILL), and prints markdown that is
copied into RESULTS.md under its command, the machine and the date. A benchmark that is
missing, fails, times out or does not fit in what is left of the overall budget is reported
as such; the run goes on.
The overall budget keeps `make bench` under 15 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.machine_info import machine

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
VLLM_TITLE = (
    "SmolLM2-135M decode on vLLM 0.32's CPU build, llama.cpp and kvscope, one thread each (`make bench-vllm`)"
)
STOP_GRACE_S = 10  # between a timed-out benchmark's SIGTERM and its SIGKILL


@dataclass(frozen=True, slots=True)
class Bench:
    key: str
    title: str
    argv: tuple[str, ...]
    timeout_s: int
    script: str  # the file that must exist for it to run

    @property
    def command(self) -> str:
        return " ".join(("python",) + self.argv[1:])


def _module(key: str, title: str, module: str, timeout_s: int, *args: str) -> Bench:
    return Bench(key, title, (PY, "-m", module, *args), timeout_s, module.replace(".", "/") + ".py")


def _script(key: str, title: str, path: str, timeout_s: int, *args: str) -> Bench:
    return Bench(key, title, (PY, path, *args), timeout_s, path)


BENCHES = (
    _module(
        "paper_memory",
        "PagedAttention memory: token-state share, batch size, throughput",
        "benchmarks.paper_memory",
        420,
    ),
    _module(
        "paper_sharing",
        "KV sharing: parallel sampling and a shared system prompt",
        "benchmarks.paper_sharing",
        120,
    ),
    _module(
        "weight_formats",
        "Weight dtypes on this CPU: float32, bfloat16, weight-only int8 and fp16 (what --dtype auto picks)",
        "benchmarks.weight_formats",
        90,
    ),
    _module(
        "cpu_matmul_candidates",
        "CPU matmul kernels torch has beyond the engine's formats: int4 and dynamic int8 against fp16",
        "benchmarks.cpu_matmul_candidates",
        90,
    ),
    _module(
        "decode_vs_llamacpp",
        "SmolLM2-135M decode beside llama.cpp's llama-server, one thread each: HTTP and in-process",
        "benchmarks.decode_vs_llamacpp",
        780,
    ),
    _script(
        "scheduler",
        "Scheduler + KV manager time per step (target <= 1 ms at 256 running)",
        "benchmarks/scheduler_bench.py",
        60,
    ),
    _script(
        "exporter",
        "Exporter: parse + normalise speed and sidecar footprint",
        "benchmarks/exporter_bench.py",
        120,
    ),
    _script(
        "exporter_hostile",
        "Exporter beside hostile targets: RSS and /healthz latency",
        "benchmarks/exporter_hostile.py",
        240,
    ),
    _script(
        "kv_events",
        "KV event subscriber: block events per second on one core",
        "benchmarks/kv_events_bench.py",
        180,
    ),
    _module(
        "server_overhead",
        "Server: HTTP overhead and simulated-server capacity",
        "benchmarks.server_overhead",
        240,
    ),
    _module(
        "sim_write_delay",
        "Server-side write delay at 256 simulated streams on a shared machine (target p99 <= 5 ms)",
        "benchmarks.sim_write_delay",
        120,
    ),
    _module(
        "sim_write_delay_unpinned",
        "Server-side write delay at 256 simulated streams, server, core and client unpinned",
        "benchmarks.sim_write_delay",
        120,
        "--no-pin",
    ),
    _script(
        "otlp_overhead",
        "Harness: client CPU per request with traceparent + OTLP receiver vs without (target <= 5%)",
        "benchmarks/otlp_overhead.py",
        420,
        "--repeats",
        "2",
        "--duration",
        "15s",
    ),
    _module(
        "sse_decode",
        "Load generator: decoding a streamed chunk, and the per-chunk path (reference vs fast)",
        "benchmarks.sse_decode",
        120,
    ),
    _module(
        "worker_profile",
        "Load generator: client CPU per chunk at 256 streams, by process (target <= 20 us)",
        "benchmarks.profile_worker",
        240,
    ),
    # Ten 20-second Locust runs by default; it gets what the rest of the budget leaves.
    _script(
        "harness_client_capacity",
        "Harness: load one Locust worker drives",
        "benchmarks/harness_client_capacity.py",
        480,
    ),
)


@dataclass(slots=True)
class Outcome:
    bench: Bench
    status: str  # ok | failed | timed out | missing | skipped
    machine_line: str = ""  # the machine, its load and the date when the benchmark started
    seconds: float = 0.0
    stdout: str = ""
    detail: str = ""


def _stop_group(proc: subprocess.Popen) -> tuple[str, str]:
    """End the process group `proc` leads, servers included: SIGTERM first, so a benchmark can
    stop the servers it started and print what it measured, SIGKILL what is left after a grace
    period. Only that group: a benchmark's own processes. (stdout, stderr)."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.communicate(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate()


def run_bench(bench: Bench, timeout_s: float) -> Outcome:
    started = machine().line()
    if not (ROOT / bench.script).exists():
        return Outcome(bench, "missing", started, detail=f"{bench.script} does not exist in this tree")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        bench.argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        out, err = _stop_group(proc)
        return Outcome(
            bench,
            "timed out",
            started,
            time.monotonic() - t0,
            out,
            f"killed after {timeout_s:.0f} s; partial output kept below"
            if out.strip()
            else f"killed after {timeout_s:.0f} s with no output",
        )
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        tail = "\n".join(err.strip().splitlines()[-15:])
        return Outcome(
            bench,
            "failed",
            started,
            seconds,
            out,
            f"exit status {proc.returncode}; stderr tail:\n\n```\n{tail}\n```",
        )
    return Outcome(bench, "ok", started, seconds, out)


def nest_headings(markdown: str, top: int = 3) -> str:
    """Shift a benchmark's own headings so its highest becomes level `top`: its sections then
    sit under the benchmark's "##" section instead of competing with the page's."""
    lines = markdown.splitlines()
    levels = [len(line) - len(line.lstrip("#")) for line in lines if line.startswith("#")]
    if not levels:
        return markdown
    shift = top - min(levels)
    return "\n".join("#" * shift + line if line.startswith("#") and shift > 0 else line for line in lines)


def kept_section(name: str, absent: str) -> str:
    """A benchmark's own last table, kept in benchmarks/NAME (not run by `make bench`)."""
    md = ROOT / "benchmarks" / name
    return md.read_text(encoding="utf-8").strip() if md.exists() else absent


def kernels_section() -> str:
    return kept_section(
        "kernels_gpu.md",
        "`benchmarks/kernels_gpu.py` (Triton decode bandwidth, paging overhead, fp8 and prefill kernels) "
        "needs CUDA. No GPU was available in this session, so it was not run; on a CUDA machine run `python "
        "benchmarks/kernels_gpu.py --out benchmarks/kernels_gpu.md` and `make bench` includes the result "
        "here. Its CPU smoke mode (`--smoke`, TRITON_INTERPRET=1) only checks that the script runs.",
    )


def peers_section() -> str:
    """`make bench-peers`'s table (kvscope against AIPerf, GuideLLM, Locust and an asyncio
    client): not in this run's set (it installs two tools and takes minutes), kept from its
    own last run."""
    return kept_section(
        "peer_clients.md",
        "`make bench-peers` (`benchmarks/peer_clients.py`) has not been run in this tree: it installs AIPerf "
        "and GuideLLM in venvs of their own and compares them with kvscope against one simulated server.",
    )


def advice_sections() -> list[str]:
    """The advice benchmarks' tables (`python -m benchmarks.replay_fidelity` and
    `python -m benchmarks.advice_accuracy`, each rerunning the bundled engine and vLLM for
    minutes to most of an hour on 2 cores): not in this run's set, kept from their own last
    runs, which write benchmarks/NAME.md."""
    return [
        "## Replay fidelity: the demo configuration against its unchanged replay (`python -m "
        "benchmarks.replay_fidelity --write`)",
        "",
        kept_section("replay_fidelity.md", "Not run in this tree yet."),
        "",
        "## Advice accuracy: verdicts applied to the server and rerun (`python -m benchmarks.advice_accuracy "
        "--write`)",
        "",
        kept_section("advice_accuracy.md", "Not run in this tree yet."),
        "",
    ]


def vllm_section() -> str:
    """`make bench-vllm`'s table (decode on vLLM's CPU build, llama.cpp and kvscope): not in this
    run's set (vLLM's own venv, minutes to start), kept from its own last run."""
    return kept_section(
        "decode_vs_vllm.md",
        "`make bench-vllm` (`benchmarks/decode_vs_vllm.py`) has not been run in this tree: it needs vLLM's "
        "CPU build (`scripts/setup_vllm.sh`) and llama-server (`scripts/build_llama_server.sh`).",
    )


def earlier_sections(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({title: its "## " section}, {key: its summary-table row}) of an earlier RESULTS.md, so
    a run with --only replaces its own sections and keeps the others (each says when and where
    it was measured)."""
    if not path.exists():
        return {}, {}
    text = path.read_text(encoding="utf-8")
    sections = {}
    for block in text.split("\n## ")[1:]:
        title = block.split("\n", 1)[0].strip()
        sections[title] = "## " + block.rstrip()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] in {b.key for b in BENCHES}:
            rows[cells[0]] = line
    return sections, rows


def _section(o: Outcome, machine_line: str) -> str:
    lines = [
        f"## {o.bench.title}",
        "",
        f"Command: `{o.bench.command}` (timeout {o.bench.timeout_s} s). "
        f"Machine: {o.machine_line or machine_line}. Status: **{o.status}** in {o.seconds:.0f} s.",
        "",
    ]
    if o.detail:
        lines += [o.detail, ""]
    if o.stdout.strip():
        lines.append(nest_headings(o.stdout.strip()))
    return "\n".join(lines)


def render(
    outcomes: list[Outcome],
    machine_line: str,
    total_s: float,
    earlier: tuple[dict[str, str], dict[str, str]] = ({}, {}),
) -> str:
    """The page: every benchmark in BENCHES order, this run's outcome where it ran, else its
    section from `earlier` (a run with --only)."""
    sections, rows = earlier
    ran = {o.bench.key: o for o in outcomes}
    kept = [b for b in BENCHES if b.key not in ran and b.title in sections]
    lines = [
        "# kvscope benchmark results",
        "",
        f"Generated by `make bench` (`python -m benchmarks.run_all`) in {total_s:.0f} s; finished on: "
        f"{machine_line}.",
        "Every figure below was produced by the command above its table on this machine; CPU timings on a "
        "shared machine are noisy, so quote ratios measured within one run.",
    ]
    if kept:
        lines.append(
            f"This run (`--only`) ran {', '.join(ran)}; the sections of {', '.join(b.key for b in kept)} are "
            "kept from earlier runs (each states its own machine and date)."
        )
    lines += ["", "| benchmark | status | seconds | command |", "|---|---|---|---|"]
    body = []
    for bench in [*BENCHES, *(o.bench for o in outcomes if o.bench not in BENCHES)]:
        if bench.key in ran:
            o = ran[bench.key]
            lines.append(f"| {bench.key} | {o.status} | {o.seconds:.0f} | `{bench.command}` |")
            body += ["", _section(o, machine_line)]
        elif bench.title in sections:
            lines.append(rows.get(bench.key, f"| {bench.key} | kept | - | `{bench.command}` |"))
            body += ["", sections[bench.title]]
    lines += body
    lines += ["", f"## {VLLM_TITLE}", "", vllm_section(), ""]
    lines += ["", "## Peer load generators against one simulated server (`make bench-peers`)", ""]
    lines += [peers_section(), ""]
    lines += ["", *advice_sections()]
    lines += ["", "## GPU kernels", "", kernels_section(), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-s", type=float, default=840.0, help="overall time budget (default 14 min)")
    ap.add_argument("--only", default="", help="comma-separated keys to run (default: all)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    args = ap.parse_args()
    only = {k for k in args.only.split(",") if k}
    t0 = time.monotonic()
    outcomes = []
    for bench in BENCHES:
        if only and bench.key not in only:
            continue
        left = args.budget_s - (time.monotonic() - t0)
        if left < 30:
            outcomes.append(
                Outcome(
                    bench,
                    "skipped",
                    machine().line(),
                    detail=f"not run: only {left:.0f} s of the budget was left",
                )
            )
            continue
        print(
            f"[run_all] {bench.key} (up to {min(bench.timeout_s, left):.0f} s)", file=sys.stderr, flush=True
        )
        outcome = run_bench(bench, min(bench.timeout_s, left))
        print(
            f"[run_all] {bench.key}: {outcome.status} in {outcome.seconds:.0f} s", file=sys.stderr, flush=True
        )
        outcomes.append(outcome)
    total = time.monotonic() - t0
    out = Path(args.out)
    text = render(outcomes, machine().line(), total, earlier_sections(out) if only else ({}, {}))
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)  # readers never see half a file
    print(f"[run_all] wrote {out} in {total:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
