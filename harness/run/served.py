"""Starting the server of `kvscope run --serve` (the command itself: `harness.run.serve`):
the port must be free, the command is started in a session of its own (`procs`), handed the
run's OTLP endpoint when it is an engine that takes vLLM's span flag and the command does not
set one, and waited on until its /health answers 200. A port taken, a command that exits, or
no health within --startup-timeout is exit 4 with the log's tail; the run's stop reaps it."""

from __future__ import annotations

from harness.run import otlp, procs
from harness.run.outcome import Exit
from harness.run.serve import ENGINE_NAMES, ServeCommand, flag_value, port_taken
from harness.run.state import Run, RunFailed

SPAN_FLAG_ENGINES = ("vllm", "bundled")  # take --otlp-traces-endpoint (and OTLP/HTTP by environment)


def start_served(run: Run, serve: ServeCommand) -> None:
    """`--serve`: start the command, wait for its /health (see `harness.run.serve`)."""
    if port_taken(serve.host, serve.port):
        raise RunFailed(
            f"--serve: {serve.host}:{serve.port} is already in use (another server holds the port); "
            "stop it or give the command another --port",
            code=Exit.TARGET_UNREACHABLE,
        )
    name = ENGINE_NAMES.get(serve.engine, "the server")
    run.say(f"starting {name}: {serve.text()}")
    run.serve = serve
    argv, env = list(serve.argv), serve.environment()
    if serve.engine in SPAN_FLAG_ENGINES and flag_value(argv, "--otlp-traces-endpoint") is None:
        argv, env = argv + otlp.engine_flags(run), otlp.engine_env(run, env) or env  # --otlp: spans to us
    child = run.children["server"] = procs.start("server", argv, run.paths["logs"], env=env)
    ok, reason = procs.wait_http(
        serve.url + "/health", run.cfg.startup_timeout_s, child, ok=lambda s: s == 200 or run.interrupts > 0
    )
    if run.interrupts:
        raise RunFailed("interrupted while the server was starting", code=Exit.INTERRUPTED)
    if not ok:
        what = (
            f"exited with status {child.returncode} before it was healthy"
            if not child.running
            else f"was not healthy on {serve.url}/health within {run.cfg.startup_timeout_s:g} s ({reason})"
        )
        raise RunFailed(
            f"--serve: the server {what}; last lines of logs/server.log:\n{child.log_tail() or '(empty)'}",
            code=Exit.TARGET_UNREACHABLE,
        )
    run.say(f"{name} is healthy on {serve.url}")
