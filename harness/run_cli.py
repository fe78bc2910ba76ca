"""`kvscope run` (one load test, start to results bundle) and `kvscope worker` (add a machine).

Import-light: argparse and the workload option specs only; Locust, pandas and the engine
are imported (or started as subprocesses) by the handlers.
"""

from __future__ import annotations

import argparse

from harness.workload_options import COMMON, WORKLOADS, Option, add_to_parser

# Engine flags `kvscope run` passes to `kvscope engine serve` when it starts the bundled
# engine (names as the engine's; --engine-seed becomes its --seed, which would otherwise
# clash with the workload's --seed). `--engine-arg` forwards anything not listed here.
ENGINE_FLAGS: tuple[Option, ...] = (
    Option("--num-blocks", int, help="KV blocks in the engine's pool (small values force preemption)"),
    Option("--kv-cache-memory", int, help="size the KV pool from a byte budget instead"),
    Option("--block-size", int, help="tokens per KV block"),
    Option("--max-num-seqs", int, help="most sequences running at once"),
    Option("--max-num-batched-tokens", int, help="token budget per engine step"),
    Option("--max-model-len", int, help="context limit per request"),
    Option("--allocator", str, help="paged, contiguous (the pre-paging baseline) or contiguous-oracle"),
    Option("--no-enable-prefix-caching", None, help="turn the engine's prefix cache off"),
    Option("--kv-cache-dtype", str, help="auto, float16, bfloat16, fp8, int8, ..."),
    Option("--attention-backend", str, help="auto, torch or triton"),
    Option("--dtype", str, help="model compute dtype"),
    Option("--device", str, help="torch device"),
    Option("--engine-seed", int, help="seed for tiny-random weights (the engine's --seed)"),
    Option("--simulate", None, help="simulation mode: a GPU cost model instead of the forward pass"),
    Option("--sim-model", str, help="simulated model, e.g. llama-3.1-70b"),
    Option("--sim-gpu", str, help="simulated GPU, e.g. h100-80gb"),
    Option("--tensor-parallel-size", int, help="simulated GPUs the model is split over"),
    Option("--gpu-memory-utilization", float, help="simulated share of GPU memory for weights plus KV cache"),
    Option("--sim-weight-dtype", str, help="simulated weight dtype (auto, bf16, fp8, int4, ...)"),
    Option("--served-model-name", str, help="the name the engine serves the model under"),
)
HARNESS_OWNED = {"records_out", "status_out", "model", "rate"}  # set by kvscope run itself

RUN_EPILOG = """\
examples:
  kvscope run --workload shared_prefix --model smollm2-135m --num-blocks 48 --duration 90s
  kvscope run --target http://gpu-box:8000 --workload chat --users 32 --spawn-rate 8 --duration 5m
  kvscope run --target http://gpu-box:8000 --workload rate --rate 4 --arrival poisson --workers 2
  kvscope run --workload chat --simulate --sim-model llama-3.1-70b --sim-gpu h100-80gb --users 256

closed loop (--users N): N users, each sending when its previous answer is in.
open loop (--rate R): R requests/s in total, whatever the server does; --users is then the
most requests in flight (default 64), and each request records how late it left.

The bundle (--out DIR): run.json, requests.parquet, server.parquet, summary.json, logs/,
raw/ (records and exporter samples as JSON lines), locust/ (Locust's CSVs).
Load it with harness.results.load(DIR).
"""


def _add_workload_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "workload options (each workload uses some; see `locust -f loadtests/NAME.py --help`)"
    )
    add_to_parser(g, tuple(o for o in COMMON if o.dest not in HARNESS_OWNED), defaults=False)
    seen = {o.flag for o in COMMON}
    for spec in WORKLOADS.values():
        for o in spec.options:
            if o.flag not in seen:
                seen.add(o.flag)
                users = ", ".join(
                    s.name for s in WORKLOADS.values() if any(x.flag == o.flag for x in s.options)
                )
                add_to_parser(
                    g, (Option(o.flag, o.type, None, f"{o.help} [{users}]", o.choices),), defaults=False
                )


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
        "--workload", required=True, choices=sorted(WORKLOADS), help="which loadtests/NAME.py to run"
    )
    p.add_argument(
        "--users",
        type=int,
        help="closed loop: concurrent users (default 8); open loop: most in flight (default 64)",
    )
    p.add_argument("--spawn-rate", type=float, help="users started per second (default: all within a second)")
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
        default=300.0,
        metavar="S",
        help="seconds to wait for the bundled engine's /health (default 300)",
    )
    p.add_argument("--quiet", action="store_true", help="no live progress line")
    _add_workload_options(p)
    e = p.add_argument_group("engine flags (only without --target; passed to `kvscope engine serve`)")
    add_to_parser(e, ENGINE_FLAGS, defaults=False)
    e.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for `kvscope engine serve`, verbatim (repeatable)",
    )
    p.set_defaults(func=_run)

    w = subparsers.add_parser(
        "worker",
        help="add this machine's CPU to a running `kvscope run` (a Locust worker)",
        description="Connect a Locust worker to the master of a `kvscope run` started with --master-bind and "
        "--remote-workers. Its records travel to the master with Locust's own messages.",
    )
    w.add_argument("--master", required=True, metavar="HOST:PORT", help="the run's --master-bind address")
    w.add_argument(
        "--workload",
        choices=sorted(WORKLOADS),
        help="the run's workload (default: fetch the locustfile from the master)",
    )
    w.add_argument(
        "--processes", type=int, default=1, help="worker processes to start on this machine (default 1)"
    )
    w.set_defaults(func=_worker)


def _run(args: argparse.Namespace) -> int:
    from harness.run import run_from_args

    return run_from_args(args)


def _worker(args: argparse.Namespace) -> int:
    from harness.run_worker import run_worker

    return run_worker(args)
