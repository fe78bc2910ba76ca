"""`kvscope engine serve`: the OpenAI-compatible server, on the real model or simulated.

Import-light: aiohttp, torch and the engine load inside `run_serve`, so `kvscope --help`
stays fast. `reference_engine.cli.register` calls `register_serve` with the subparsers of
the `engine` command.

Lifecycle: SIGTERM or SIGINT stops admission (new /v1 requests get 503, /health turns 503),
lets in-flight requests finish for up to --shutdown-grace seconds, aborts what is left
(those streams end with finish_reason "abort"), closes the listener and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

log = logging.getLogger("kvscope.server")
API_KEY_ENV = "KVSCOPE_API_KEY"


def register_serve(subparsers) -> None:
    from reference_engine.cli import add_engine_args

    p = subparsers.add_parser(
        "serve",
        help="serve the engine over an OpenAI-compatible HTTP API with vLLM-style /metrics",
        description="Serve /v1/models, /v1/completions, /v1/chat/completions (SSE streaming), /health and "
        "/metrics (vLLM V1 metric names). Every final response carries a 'kvscope' object with the server's "
        "own per-request timings (also in the x-kvscope-timing header when not streaming). With --simulate, "
        "the real scheduler and block pool run with a cost model of --sim-model on --sim-gpu instead of a model.",
    )
    s = p.add_argument_group("server")
    s.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind; 0.0.0.0 exposes the server to the network (default: %(default)s)",
    )
    s.add_argument(
        "--port", type=int, default=8000, help="TCP port; 0 picks a free one (default: %(default)s)"
    )
    s.add_argument(
        "--served-model-name",
        help="name clients send as 'model' and metrics carry as model_name "
        "(default: --model, or --sim-model with --simulate)",
    )
    s.add_argument(
        "--api-key",
        help=f"require 'Authorization: Bearer KEY' on /v1/* (also ${API_KEY_ENV}); "
        "prefer --api-key-file, since arguments are visible to other local users",
    )
    s.add_argument("--api-key-file", help="read the API key from this file (first line)")
    s.add_argument(
        "--shutdown-grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="on SIGTERM, how long in-flight requests may run before they are aborted (default: %(default)s)",
    )
    s.add_argument("--access-log", action="store_true", help="log one line per HTTP request")
    s.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="(default: %(default)s)",
    )
    add_engine_args(p)
    sim = p.add_argument_group("simulation")
    sim.add_argument(
        "--simulate",
        action="store_true",
        help="no model: step times from a cost model, KV pool sized for --sim-model on --sim-gpu",
    )
    sim.add_argument(
        "--sim-model", default="llama-3.1-70b", help="catalogue model to simulate (default: %(default)s)"
    )
    sim.add_argument(
        "--sim-gpu", default="h100-80gb", help="catalogue GPU to simulate (default: %(default)s)"
    )
    sim.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=1,
        help="GPUs the simulated model is split over (default: %(default)s)",
    )
    sim.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="share of GPU memory for weights plus KV cache, as in vLLM (default: %(default)s)",
    )
    sim.add_argument(
        "--sim-weight-dtype",
        default="auto",
        choices=("auto", "bf16", "fp16", "fp8", "int8", "int4"),
        help="weight dtype of the simulated model (auto: its checkpoint's)",
    )
    p.set_defaults(func=run_serve)


def read_api_key(args: argparse.Namespace) -> str | None:
    """--api-key, --api-key-file or $KVSCOPE_API_KEY (at most one of the first two)."""
    if args.api_key and args.api_key_file:
        raise ValueError("give --api-key or --api-key-file, not both")
    if args.api_key_file:
        with open(args.api_key_file, encoding="utf-8") as f:
            key = f.readline().strip()
        if not key:
            raise ValueError(f"{args.api_key_file}: the API key file is empty")
        return key
    return args.api_key or os.environ.get(API_KEY_ENV) or None


def run_serve(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from reference_engine.cli import config_from_args
    from reference_engine.model.errors import ModelLoadError
    from reference_engine.server.app import create_app
    from reference_engine.server.metrics import cache_config_labels
    from reference_engine.server.state import ServerConfig

    try:
        api_key = read_api_key(args)
        config = config_from_args(args)
        if args.simulate:
            from reference_engine.sim.engine import SimSpec, build_sim_engine

            spec = SimSpec(
                args.sim_model,
                args.sim_gpu,
                args.tensor_parallel_size,
                args.gpu_memory_utilization,
                args.sim_weight_dtype,
            )
            built = build_sim_engine(spec, config)
            source = f"simulated {built.model_name} on {args.tensor_parallel_size} x {args.sim_gpu}"
            on_step_start = built.executor.begin_step
            default_name = args.sim_model
        else:
            from reference_engine.engine_factory import build_engine

            built = build_engine(config)
            source, on_step_start, default_name = built.loaded.source, None, args.model
    except (OSError, ValueError, ModelLoadError) as exc:
        print(f"kvscope engine serve: error: {exc}", file=sys.stderr)
        return 2
    cache_info = cache_config_labels(
        config.block_size,
        built.num_blocks,
        built.kv_cache_dtype,
        config.enable_prefix_caching,
        config.allocator,
    )
    server_config = ServerConfig(args.served_model_name or default_name, source, api_key, args.shutdown_grace)
    app = create_app(built.engine, built.tokenizer, server_config, cache_info, on_step_start)
    log.info(
        "serving %s (%s): %d KV blocks x %d tokens, max_model_len %d%s",
        server_config.served_model_name,
        source,
        built.num_blocks,
        config.block_size,
        built.max_model_len,
        ", API key required" if api_key else "",
    )
    return asyncio.run(serve(app, args.host, args.port, args.shutdown_grace, args.access_log))


async def serve(app, host: str, port: int, grace_s: float, access_log: bool = False) -> int:
    """Run until SIGTERM/SIGINT, then drain (see the module doc). Returns the exit code."""
    from aiohttp import web

    from reference_engine.server.app import drain

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=log if access_log else None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    for address in runner.addresses:
        # One machine-readable line, so a parent process can find a port chosen with --port 0.
        print(f"kvscope engine serve: listening on http://{address[0]}:{address[1]}", flush=True)
    await stop.wait()
    log.info("shutting down: no new requests; %.1f s grace for in-flight ones", grace_s)
    clean = await drain(app, grace_s)
    await runner.cleanup()
    log.info("stopped (%s)", "all requests finished" if clean else "some requests were aborted")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m reference_engine.server.serve_cli [serve flags]`: the same command without
    the kvscope CLI around it (used by tests that run the server as a subprocess)."""
    parser = argparse.ArgumentParser(prog="kvscope engine")
    register_serve(parser.add_subparsers(dest="engine_command"))
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
