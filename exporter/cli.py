"""`kvscope exporter` (run the sidecar) and `kvscope exporter inspect` (read one exposition).

Import-light: argparse and stdlib-only exporter modules at import time (defaults, units, the
dialect names); handlers import aiohttp and the rest.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from exporter.defaults import (
    DEFAULT_FETCH_TIMEOUT_S,
    DEFAULT_INSTANCE_LIMIT,
    DEFAULT_INTERVAL_S,
    DEFAULT_LISTEN,
    DEFAULT_MAX_BYTES,
    DEFAULT_SAMPLE_LIMIT,
    DEFAULT_WINDOW_S,
)
from exporter.dialects.detect import DIALECTS
from exporter.dialects.probe import KV_LAYOUTS
from exporter.redirects import POLICIES
from exporter.units import count, duration, host_port, size

DIALECT_CHOICES = ("auto", *DIALECTS)

RUN_EPILOG = """\
examples:
  kvscope exporter --target http://127.0.0.1:8000/metrics
  kvscope exporter --target a=http://gpu-a:8000 --target b=http://gpu-b:30000 --record runs/x/exporter
  kvscope exporter --target a=https://gpu-a/metrics --target-auth a=bearer-file:/run/secrets/a \
      --ca-file /etc/kvscope/ca.pem
  kvscope exporter --target vllm=http://gpu-a:8000 --kv-events vllm=tcp://gpu-a:5557,replay=tcp://gpu-a:5558
  kvscope exporter --target vllm=http://gpu-a:8000 --kv-events auto
  kvscope exporter inspect saved.prom --json
  curl -s http://127.0.0.1:8000/metrics | kvscope exporter inspect -

endpoints: /metrics (kvscope_* canonical metrics, see exporter/METRICS.md),
/api/v1/targets, /api/v1/samples?target=NAME&since=UNIX_SECONDS, /healthz, and with
--kv-events /api/v1/kv_events (the block-level view: cached blocks, capacity misses,
the miss-ratio curve, hot prefix chains).
Scrape it from Prometheus with honor_labels: true, so the exporter's `instance` label (the
engine instance) is kept instead of being renamed to exported_instance.

credentials: --target-auth NAME=KIND:WHERE, KIND one of bearer-file, bearer-env, basic-file,
basic-env; WHERE a file (first line; read at every scrape, so rotation needs no restart) or an
environment variable. A bearer secret is the token, a basic one user:password. Passwords in a
target URL work too but are visible in `ps`; they are never shown or logged.
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "exporter",
        help="scrape LLM servers' /metrics and re-export canonical kvscope_* metrics",
        description="Scrape one or more paged LLM servers (vLLM, SGLang, TensorRT-LLM, TGI, llama.cpp, "
        "LMDeploy, the bundled reference engine), recognise each one's metric dialect, and "
        "re-export KV usage, capacity, prefix-cache reuse, preemptions, queueing and latency "
        "histograms under one set of names, with live advice.",
        epilog=RUN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--target",
        action="append",
        default=[],
        metavar="[NAME=]URL",
        help="a server's metrics URL (http or https; a bare host:port URL gets /metrics). "
        "NAME becomes the `target` label (default: host:port). Repeat for several servers.",
    )
    p.add_argument(
        "--listen",
        type=host_port,
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help="where to serve /metrics and the JSON API "
        f"(default {DEFAULT_LISTEN[0]}:{DEFAULT_LISTEN[1]}, loopback only)",
    )
    p.add_argument(
        "--interval",
        type=duration,
        default=DEFAULT_INTERVAL_S,
        metavar="DURATION",
        help=f"scrape every DURATION, e.g. 1s, 500ms (default {DEFAULT_INTERVAL_S:g}s)",
    )
    p.add_argument(
        "--timeout",
        type=duration,
        default=None,
        metavar="DURATION",
        help="per-scrape time limit including a slow body (default 0.9 x interval)",
    )
    p.add_argument(
        "--dialect",
        choices=DIALECT_CHOICES,
        default="auto",
        help="force the engine dialect instead of detecting it from metric names (default auto)",
    )
    p.add_argument(
        "--window",
        type=duration,
        default=DEFAULT_WINDOW_S,
        metavar="DURATION",
        help=f"window for the hit ratio, preemption rate and live advice (default {DEFAULT_WINDOW_S:g}s)",
    )
    p.add_argument(
        "--max-body",
        type=size,
        default=DEFAULT_MAX_BYTES,
        metavar="SIZE",
        help="refuse expositions larger than SIZE after decompression "
        f"(default {DEFAULT_MAX_BYTES >> 20}MiB)",
    )
    add_probe_flags(p)
    p.add_argument(
        "--sample-limit",
        type=count,
        default=DEFAULT_SAMPLE_LIMIT,
        metavar="N",
        help="refuse a scrape with more than N samples (or 4 N lines), like Prometheus's sample_limit; "
        f"the target is down and marked over its limit (default {DEFAULT_SAMPLE_LIMIT})",
    )
    p.add_argument(
        "--instance-limit",
        type=count,
        default=DEFAULT_INSTANCE_LIMIT,
        metavar="N",
        help=f"refuse a scrape with more than N engine instances (default {DEFAULT_INSTANCE_LIMIT})",
    )
    p.add_argument(
        "--target-auth",
        action="append",
        default=[],
        metavar="NAME=KIND:WHERE",
        help="credentials for target NAME from a file or the environment (see below); repeatable",
    )
    p.add_argument(
        "--ca-file",
        default=None,
        metavar="PEM",
        help="verify https targets against the CAs in this file instead of the system's "
        "(certificates are always verified)",
    )
    p.add_argument(
        "--follow-redirects",
        choices=POLICIES,
        default="same-origin",
        help="which redirects a scrape follows: same-origin (same scheme, host and port; default), "
        "none, or any (credentials are never sent to another origin)",
    )
    p.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="DIR",
        help="append every normalised sample to DIR/<target>.jsonl (one JSON object a line)",
    )
    p.add_argument(
        "--kv-events",
        action="append",
        default=[],
        metavar="NAME=tcp://HOST:PORT[,replay=tcp://HOST:PORT] | NAME=auto",
        help="also subscribe to a server's KV cache events (vLLM/SGLang --kv-events-config, the bundled "
        "engine's): NAME is the --target they belong to, the address its PUB socket, replay= its ROUTER "
        "socket (missed batches are then recovered); ',bind' binds the address instead of connecting, "
        "',topic=T' filters by topic. NAME=auto (or auto, with one --target) asks the target at start "
        "(GET /kv_event_sources, vLLM >= 0.32 and the bundled engine) and subscribes to what it states; "
        "a publisher that connects to an address of this machine is bound here, any other problem is said. "
        "Repeat for several servers. Adds kvscope_kv_* metrics and /api/v1/kv_events",
    )
    p.set_defaults(func=run_exporter)
    sub = p.add_subparsers(dest="exporter_command", metavar="SUBCOMMAND")
    ip = sub.add_parser(
        "inspect",
        help="read one exposition and print its dialect and canonical quantities",
        description="Read one exposition (a file, - for stdin, or an http(s) URL), detect its dialect and "
        "print every canonical quantity per engine instance; null means the engine does not "
        "report it. Notes say what was approximated or missing.",
    )
    ip.add_argument(
        "source", metavar="FILE_OR_URL", help="path, '-' for stdin, or http(s)://host:port/metrics"
    )
    ip.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ip.add_argument("--dialect", choices=DIALECT_CHOICES, default="auto", help="force the dialect")
    ip.add_argument(
        "--timeout",
        type=duration,
        default=DEFAULT_FETCH_TIMEOUT_S,
        metavar="DURATION",
        help=f"time limit when SOURCE is a URL (default {DEFAULT_FETCH_TIMEOUT_S:g}s)",
    )
    ip.add_argument("--ca-file", default=None, metavar="PEM", help="CAs to verify an https SOURCE with")
    add_probe_flags(ip)
    ip.set_defaults(func=run_inspect)


def add_probe_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-probe",
        dest="probe",
        action="store_false",
        help="do not fetch the extra endpoints some dialects read beside /metrics (llama.cpp: GET /slots "
        "and /v1/models for KV usage and capacity); those quantities then stay unknown",
    )
    p.add_argument(
        "--llamacpp-kv-layout",
        choices=KV_LAYOUTS,
        default="auto",
        help="llama-server's KV cache: one pool shared by all slots (unified: -kvu, or -np left at auto) "
        "or one per slot (explicit -np N); no endpoint says which, auto infers it (default auto)",
    )


def run_exporter(args: argparse.Namespace) -> int:
    from exporter.serve import serve

    return serve(args)


def run_inspect(args: argparse.Namespace) -> int:
    from exporter.dialects.probe import ProbeSettings
    from exporter.inspect_cmd import inspect

    return inspect(
        args.source,
        as_json=args.json,
        dialect=args.dialect,
        timeout=args.timeout,
        ca_file=args.ca_file,
        probe=args.probe,
        settings=ProbeSettings(args.llamacpp_kv_layout),
        out=sys.stdout,
        err=sys.stderr,
    )
