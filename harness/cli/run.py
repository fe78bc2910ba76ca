"""`kvscope run`: one load test, from starting the target to the results bundle.

Import-light: argparse and the option declarations only; Locust, pandas and the engine are
imported (or started as subprocesses) by the handler.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from exporter.dialects.probe import KV_LAYOUTS
from exporter.units import host_port
from harness.cli.load_flags import add_engine_flags, add_workload_options
from harness.cli.otlp_flags import add_otlp_flags
from harness.run.engine_flags import STARTUP_TIMEOUT_S
from harness.run.outcome import DEFAULT_MAX_ERROR_RATE, EXIT_HELP
from harness.workload.options import API_KEY_ENV, WORKLOADS

RUN_EPILOG = f"""\
examples:
  kvscope run --workload shared_prefix --model smollm2-135m --num-blocks 48 --duration 90s
  kvscope run --target http://gpu-box:8000 --workload chat --users 32 --spawn-rate 8 --duration 5m
  kvscope run --target http://gpu-box:8000 --workload rate --rate 4 --arrival poisson --workers 2
  kvscope run --target http://gpu-box:8000 --workload shared_prefix --kv-events auto --otlp
  kvscope run --workload chat --simulate --sim-model llama-3.1-70b --sim-gpu h100-80gb --users 256
  kvscope run --serve "python -m vllm.entrypoints.openai.api_server --model M --port 8011" --workload chat

--serve CMD: kvscope starts the server itself (in its own process group), waits until its
/health answers, and stops it by that group at the end; a port already in use, a command that
exits, or no health within --startup-timeout ends the run with exit 4 and nothing left running.

closed loop (--users N): N users, each sending when its previous answer is in.
open loop (--rate R): R requests/s in total, whatever the server does; --users is then the
most requests in flight (default 64), and each request records how late it left.

closed-loop users start staggered (over --warmup, else over a tenth of the run, at most
10 s) and draw their lengths within --length-spread of the mean, so they do not move in
lock-step. Each run draws a new --seed (recorded in run.json): prompts differ from the last
run's, so a rerun does not find them in the server's prefix cache; --seed N reproduces a run.

The API key (--api-key, --api-key-file or ${API_KEY_ENV}) reaches the engine and Locust
through their environment, never their command lines.

The bundle (--out DIR): run.json (the configuration, the seed, how the run ended and its exit
status, and the deployment facts with their source: the bundled engine's configuration, or
what a --target stated), requests.parquet, server.parquet, summary.json, logs/, raw/ (records
and exporter samples as JSON lines), locust/ (Locust's CSVs); with --otlp also spans.parquet
(the server's request spans, joined to the requests by the traceparent each one carries:
docs/spans.md); with --kv-events kv_events.parquet (docs/kv-events.md).

A target that stops answering during the run (requests fail on the connection and its
/health does not answer) ends the run within seconds with exit 4; meanwhile users back off
(exponentially, at most 2 s) instead of failing at loop speed.
Load it with harness.results.load(DIR).

{EXIT_HELP}
The console's last line says which, and why.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run",
        help="run a load test (against the bundled engine or --target) and write a results bundle",
        description="Start the target (the bundled engine unless --target is given), the exporter on its "
        "/metrics, and a Locust workload (headless master + local workers); show live progress; "
        "write the results bundle. Workloads: "
        + "; ".join(f"{n}: {s.summary}" for n, s in WORKLOADS.items()),
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument(
        "--target", metavar="URL", help="an OpenAI-compatible server (default: start the bundled engine)"
    )
    p.add_argument(
        "--serve",
        metavar="CMD",
        help="start this server command, wait for its /health, run against it and stop it (its whole "
        "process group) at the end, e.g. --serve 'vllm serve MODEL --port 8000'; leading NAME=VALUE words "
        "set its environment. The port: the command's --port, else --target's, else the engine's "
        "default (vLLM 8000, llama-server 8080). run.json records the command and the engine "
        "(`kvscope advise --verify` restarts it with each verdict's change)",
    )
    p.add_argument(
        "--workload", required=True, choices=sorted(WORKLOADS), help="which loadtests/NAME.py to run"
    )
    p.add_argument(
        "--users",
        type=int,
        help="closed loop: concurrent users (default 8); open loop: most in flight (default 64)",
    )
    p.add_argument(
        "--spawn-rate",
        type=float,
        help="users started per second (default: closed loop staggered over --warmup or a tenth of the run; "
        "open loop all at once)",
    )
    p.add_argument(
        "--rate",
        type=float,
        help="open loop: requests per second in total (Poisson unless --arrival constant)",
    )
    p.add_argument(
        "--duration",
        default="60s",
        metavar="DURATION",
        help="how long to send requests, e.g. 90s, 5m (default 60s)",
    )
    p.add_argument("--workers", type=int, default=1, help="local Locust worker processes (default 1)")
    p.add_argument(
        "--remote-workers",
        type=int,
        default=0,
        metavar="N",
        help="also wait for N `kvscope worker` processes from other machines (use with --master-bind)",
    )
    p.add_argument(
        "--master-bind",
        type=host_port,
        metavar="HOST:PORT",
        help="where the Locust master listens for workers "
        "(default 127.0.0.1 and a free port; use 0.0.0.0:5557 to accept other machines)",
    )
    p.add_argument("--out", metavar="DIR", help="results bundle folder (default runs/<time>-<workload>)")
    p.add_argument(
        "--model",
        help="with the bundled engine: the engine's --model (default: the engine's, smollm2-135m; "
        "tiny-random starts in seconds); "
        "with --target: the model name to request (default: the first in /v1/models)",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=STARTUP_TIMEOUT_S,
        metavar="S",
        help="seconds to wait for the bundled engine's (or --serve's) /health (default 300)",
    )
    p.add_argument(
        "--deployment",
        metavar="KEY=VALUE,...",
        help="with --target: what you know about the server that it does not state, recorded in run.json "
        "as yours, e.g. model=llama-3.1-8b,gpu=h100-80gb,tp=1,kv-cache-dtype=auto,num-gpu-blocks=9518,"
        "max-num-seqs=256 (keys: model, gpu, tp, gpu-memory-utilization, weight-dtype, kv-cache-dtype, "
        "num-gpu-blocks, block-size, max-num-seqs, max-num-batched-tokens, max-model-len, "
        "enable-prefix-caching, allocator); the advice names what it lacks",
    )
    p.add_argument(
        "--warmup",
        metavar="DURATION",
        help="load the server this long first, e.g. 10s: requests sent then are recorded as phase 'warmup' "
        "and kept out of every statistic (marked in the plots); --duration counts after it (default: none)",
    )
    p.add_argument(
        "--max-error-rate",
        metavar="SHARE",
        help="the most failed requests a run may have and still exit 0, e.g. 5%% or 0.05 "
        f"(default {DEFAULT_MAX_ERROR_RATE * 100:g}%%); above it the run exits 3",
    )
    p.add_argument(
        "--fail-on-unreliable",
        action="store_true",
        help="exit 5 when the self-check finds the measurement unreliable (for CI)",
    )
    p.add_argument(
        "--no-advise",
        action="store_true",
        help="skip the advisor (and its what-if replays) at the end; the report is still written "
        "(`kvscope advise DIR` later)",
    )
    p.add_argument(
        "--api-key-file",
        metavar="FILE",
        help=f"read the server's API key from the first line of FILE (or set ${API_KEY_ENV})",
    )
    p.add_argument(
        "--kv-events",
        nargs="?",
        const="auto",
        action="append",
        metavar="auto | tcp://HOST:PORT[,replay=tcp://HOST:PORT]",
        help="record the server's KV cache events (block stores and evictions: capacity misses, the "
        "miss-ratio curve, hot prefixes). Bundled engine: give no value (or auto), kvscope sets up the "
        "engine's --kv-events-config on loopback. --target: auto reads where the server publishes "
        "(GET /kv_event_sources, vLLM >= 0.32; a publisher that connects to an address of this machine "
        "is bound by kvscope, any other problem is said before the load starts); or give its PUB "
        "endpoint and replay ROUTER (its --kv-events-config endpoint and replay_endpoint), repeated "
        "for replicas. A `kv events:` line ends the run; no batch within 10 s of the first completed "
        "request is said at once and noted in run.json with its likely cause",
    )
    p.add_argument(
        "--llamacpp-kv-layout",
        choices=KV_LAYOUTS,
        default="auto",
        help="with a llama-server --target: its KV cache is one pool shared by all slots (unified: -kvu, or "
        "-np left at auto) or one per slot (explicit -np N); no endpoint says which, the exporter infers it "
        "unless told (default auto)",
    )
    p.add_argument("--quiet", action="store_true", help="no live progress line")
    p.add_argument(
        "--verify",
        action="store_true",
        help="after the run and its advice, prove each verdict on the server: `kvscope advise --verify` "
        "on the bundle (the bundled engine or --serve; each change is one more run of the same length)",
    )
    p.add_argument(
        "--verify-only",
        metavar="ACTION,...",
        help="--verify with only these verdicts (e.g. add_memory)",
    )
    add_workload_options(
        p, "workload options (each workload uses some; see `locust -f loadtests/NAME.py --help`)"
    )
    add_engine_flags(p)
    add_otlp_flags(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from harness.run.config import default_out
    from harness.run.orchestrate import run_from_args
    from harness.run.outcome import MEASURED, Exit

    args.verify = args.verify or bool(args.verify_only)
    if args.verify and (args.no_advise or (args.target and not args.serve)):
        print(
            "kvscope run: error: --verify needs the advice (not --no-advise) and a server kvscope starts "
            "(the bundled engine or --serve, not --target alone)",
            file=sys.stderr,
        )
        return int(Exit.CONFIG_ERROR)
    if args.verify and not args.out:
        args.out = str(default_out(args.workload))  # the loop needs to know where the bundle went
    code = run_from_args(args)
    if not args.verify or code not in MEASURED:
        return code
    from harness.cli.advise import verify_bundle

    return verify_bundle(Path(args.out), args.verify_only) or code
