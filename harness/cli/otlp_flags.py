"""`kvscope run`'s span flags (the receiver: `harness.run.otlp`)."""

from __future__ import annotations

import argparse

from exporter.units import host_port
from harness.run.otlp_config import DEFAULT_GRACE_S


def add_otlp_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "server spans (OTLP): per-request server timings from the server's OpenTelemetry spans"
    )
    group.add_argument(
        "--otlp",
        action="store_true",
        help="run an OTLP/HTTP trace receiver for the run and join the server's request spans (vLLM's "
        "llm_request, SGLang's, TGI's) to the requests by the traceparent each request carries; the bundled "
        "engine is started with --otlp-traces-endpoint pointing at it, a --target must be pointed at the "
        "endpoint the run prints (docs/spans.md)",
    )
    group.add_argument(
        "--otlp-listen",
        type=host_port,
        metavar="HOST:PORT",
        help="where the receiver listens (implies --otlp; default 127.0.0.1 and a free port; port 0 picks "
        "one; 0.0.0.0:4318 accepts spans from other machines)",
    )
    group.add_argument(
        "--otlp-grace",
        metavar="DURATION",
        help=f"after the last response, how long to wait for spans still in the server's export batch "
        f"(default {DEFAULT_GRACE_S:g}s, above vLLM's 5 s batch delay); ends early once every "
        "successful request has its span",
    )
