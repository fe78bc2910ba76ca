"""`kvscope engine serve`: the OpenAI-compatible server, on the real model or simulated.

Import-light: aiohttp, torch and the engine load inside `run_serve`, so `kvscope --help`
stays fast. `reference_engine.cli.register` calls `register_serve` with the subparsers of
the `engine` command.

Lifecycle: SIGTERM or SIGINT stops admission (new /v1 requests get 503, /health turns 503),
lets in-flight requests finish for up to --shutdown-grace seconds, aborts what is left
(those streams end with finish_reason "abort"), stops the engine core, closes the listener
and exits 0. If the engine core process dies, in-flight requests end with a 503 error, new
ones get 503, and the server stops with exit status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import resource
import signal
import sys
from collections.abc import Coroutine
from typing import Any

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
    from reference_engine.core.launch import CoreLaunch
    from reference_engine.model.errors import ModelLoadError
    from reference_engine.server.app import create_app
    from reference_engine.server.state import ServerConfig

    try:
        api_key = read_api_key(options)
        limits = options.http_limits()
        config = engine_config_from_args(args)
        spec = simulator_config_from_args(args)
        config.validate()
        tracer = request_tracer(options.otlp_traces_endpoint)
        client, tokenizer = open_core(CoreLaunch(config, spec), options.engine_core)
    except (OSError, ValueError, ModelLoadError) as exc:
        print(f"kvscope engine serve: error: {exc}", file=sys.stderr)
        return 2
    name = options.served_model_name or (spec.model if spec is not None else config.model)
    server_config = ServerConfig(
        name, api_key=api_key, timing_object=not options.no_kvscope_timing, tracer=tracer
    )
    app = create_app(client, tokenizer, server_config)
    warn_if_few_file_descriptors(limits.max_connections)
    try:
        return run_event_loop(
            serve(app, options.host, options.port, options.shutdown_grace, options.access_log, limits)
        )
    finally:
        if tracer is not None:
            tracer.shutdown()  # the spans still queued in the SDK leave now


def run_event_loop(main: Coroutine[Any, Any, int]) -> int:
    """`main` on uvloop, as vLLM's API server runs: its transports write from C, which is most
    of what a stream costs the server per step at hundreds of streams (asyncio's when uvloop is
    not installed)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def request_tracer(endpoint: str | None):
    """The span exporter for --otlp-traces-endpoint (None without it); ValueError when it cannot be made."""
    if not endpoint:
        return None
    from reference_engine.server.tracing import RequestTracer

    return RequestTracer(endpoint)


def open_core(launch, mode: str):
    """(core client, the server's tokenizer). In process mode the tokenizer loads here, without
    the weights, and the core process starts at once to load the model meanwhile."""
    if mode == "thread":
        from reference_engine.core.client import ThreadCoreClient
        from reference_engine.core.launch import build_core

        built = build_core(launch)
        return ThreadCoreClient(built.engine, built.ready, built.on_step_start), built.engine.tokenizer
    from reference_engine.core.process_client import ProcessCoreClient

    if launch.sim is not None:
        from reference_engine.sim.engine import load_sim_tokenizer

        tokenizer = load_sim_tokenizer()
    else:
        from reference_engine.model.tokenizer_source import load_tokenizer

        tokenizer = load_tokenizer(launch.config.model)
    client = ProcessCoreClient(launch)
    client.spawn()
    return client, tokenizer


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
    """Run until SIGTERM/SIGINT (or the engine core process dies), then drain (see the module
    doc). Returns the exit code: 0 after a signal, 1 if the core died, 2 if it never started."""
    from aiohttp import web

    from reference_engine.core.client import CoreStartError
    from reference_engine.server.app import drain
    from reference_engine.server.gc_schedule import BetweenSteps
    from reference_engine.server.http_guard import GuardedAppRunner
    from reference_engine.server.log_limit import RateLimitedLog
    from reference_engine.server.state import STATE

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    limits = limits or HttpLimits()
    runner = GuardedAppRunner(
        app,
        limits,
        RateLimitedLog(log),
        before_request=app[STATE].engine.route_waiting,
        handler_cancellation=True,
        access_log=log if access_log else None,
    )
    try:
        await runner.setup()  # starts the engine core and waits until it is ready
    except CoreStartError as exc:
        print(f"kvscope engine serve: error: {exc}", file=sys.stderr)
        await runner.cleanup()
        return 2
    state = app[STATE]
    ready = state.ready
    log.info(
        "serving %s (%s, weights %s): %d KV blocks x %d tokens, max_model_len %d, engine core %s%s",
        state.config.served_model_name,
        ready.model_source,
        ready.weights,
        ready.num_blocks,
        ready.block_size,
        ready.max_model_len,
        f"pid {ready.pid}" if ready.pid else "in a thread",
        ", API key required" if state.config.api_key else "",
    )
    # aiohttp's default listen backlog (128) overflows when a burst of clients connects at once
    # (the kernel drops the SYNs past it; those clients retry after a second): a TTFT of 1 s
    # that is no one's queue. Let the connection cap decide (the kernel caps it at somaxconn).
    site = web.TCPSite(runner, host, port, backlog=limits.max_connections)
    await site.start()
    # What start-up made (tokenizer, modules, the app) lives as long as the server: keep it out
    # of the collector's way, as vLLM's API server does, so that a full collection scans only
    # what requests made. Unfrozen, one took 30-40 ms at 256 streams: a whole step's writes late.
    gc.collect()
    gc.freeze()
    collector = BetweenSteps(loop)
    collector.start()
    state.engine.after_pass = collector.collect_due
    for address in runner.addresses:
        # One machine-readable line, so a parent process can find a port chosen with --port 0.
        print(f"kvscope engine serve: listening on http://{address[0]}:{address[1]}", flush=True)
    engine = state.engine
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(engine.dead_event.wait())]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for waiter in waiters:
        waiter.cancel()
    if engine.dead:
        log.error("the engine core is gone: failing what was in flight and stopping")
        grace_s = 0.0
    log.info("shutting down: no new requests; %.1f s grace for in-flight ones", grace_s)
    clean = await drain(app, grace_s)
    await runner.cleanup()
    collector.stop()
    log.info("stopped (%s)", "all requests finished" if clean else "some requests were aborted")
    return 1 if engine.dead else 0


def main(argv: list[str] | None = None) -> int:
    """`python -m reference_engine.server.serve_cli [serve flags]`: the same command without
    the kvscope CLI around it (used by tests that run the server as a subprocess)."""
    parser = argparse.ArgumentParser(prog="kvscope engine")
    register_serve(parser.add_subparsers(dest="engine_command"))
    args = parser.parse_args(["serve", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
