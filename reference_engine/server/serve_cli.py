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
import resource
import signal
import sys

from reference_engine.engine_args import (
    add_engine_args,
    engine_config_from_args,
    serve_options_from_args,
    simulator_config_from_args,
)
from reference_engine.serve_options import HttpLimits, read_api_key

log = logging.getLogger("kvscope.server")


def register_serve(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve the engine over an OpenAI-compatible HTTP API with vLLM-style /metrics",
        description="Serve /v1/models, /v1/completions, /v1/chat/completions (SSE streaming), /health and "
        "/metrics (vLLM V1 metric names). Every final response carries a 'kvscope' object with the server's "
        "own per-request timings (also in the x-kvscope-timing header when not streaming). With --simulate, "
        "the real scheduler and block pool run with a cost model of --sim-model on --sim-gpu instead of a "
        "model.",
    )
    add_engine_args(p)
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    options = serve_options_from_args(args)
    logging.basicConfig(
        level=options.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from reference_engine.model.errors import ModelLoadError
    from reference_engine.server.app import create_app
    from reference_engine.server.metrics import cache_config_labels
    from reference_engine.server.state import ServerConfig

    try:
        api_key = read_api_key(options)
        limits = options.http_limits()
        config = engine_config_from_args(args)
        spec = simulator_config_from_args(args)
        if spec is not None:
            from reference_engine.sim.engine import build_sim_engine

            built = build_sim_engine(spec, config)
            source = f"simulated {built.model_name} on {spec.tensor_parallel_size} x {spec.gpu}"
            on_step_start = built.executor.begin_step
            default_name = spec.model
        else:
            from reference_engine.engine_factory import build_engine

            built = build_engine(config)
            source, on_step_start, default_name = built.loaded.source, None, config.model
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
    server_config = ServerConfig(options.served_model_name or default_name, source, api_key)
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
    warn_if_few_file_descriptors(limits.max_connections)
    return asyncio.run(
        serve(app, options.host, options.port, options.shutdown_grace, options.access_log, limits)
    )


def warn_if_few_file_descriptors(max_connections: int) -> None:
    """Connections past the process's file-descriptor limit fail at accept() instead of being
    answered 503, so say so at start-up."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < max_connections + 64:
        log.warning(
            "--max-connections %d is above what the open-file limit (%d) allows; raise it "
            "(ulimit -n) or lower --max-connections",
            max_connections,
            soft,
        )


async def serve(
    app,
    host: str,
    port: int,
    grace_s: float,
    access_log: bool = False,
    limits: HttpLimits | None = None,
) -> int:
    """Run until SIGTERM/SIGINT, then drain (see the module doc). Returns the exit code."""
    from aiohttp import web

    from reference_engine.server.app import drain
    from reference_engine.server.http_guard import GuardedAppRunner
    from reference_engine.server.log_limit import RateLimitedLog

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = GuardedAppRunner(
        app,
        limits or HttpLimits(),
        RateLimitedLog(log),
        handler_cancellation=True,
        access_log=log if access_log else None,
    )
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
