"""The span receiver in a run: started first (the bundled engine is given its endpoint),
waited for after the load (the grace period), stopped last (after the engine, whose exporter
flushes at shutdown: what arrives after the grace period is counted late).

The receiver is a child process like the exporter (`harness.otlp.serve`): whatever a server
sends it, the run's own process neither parses it nor holds it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from harness.bundle.finding import Finding
from harness.bundle.spans import RAW_DIR
from harness.otlp.sink import ENDPOINT_FILE
from harness.run import procs
from harness.run.state import Run, RunFailed

START_TIMEOUT_S = 15.0
POLL_S = 0.2
PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"


def receiver_command(host: str, port: int, out_dir: str, max_spans: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness.otlp.serve",
        "--listen",
        f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "--out",
        out_dir,
        "--max-spans",
        str(max_spans),
    ]


def start_receiver(run: Run) -> None:
    """Start it and wait until it listens; `run.otlp_endpoint` is then the URL to give servers."""
    cfg = run.cfg.otlp
    if cfg is None:
        return
    out = run.cfg.out / RAW_DIR
    out.mkdir(parents=True, exist_ok=True)
    child = run.children["otlp"] = procs.start(
        "otlp-receiver", receiver_command(*cfg.listen, str(out), cfg.max_spans), run.paths["logs"]
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    while (endpoint := _endpoint(out / ENDPOINT_FILE)) is None:
        if not child.running or time.monotonic() > deadline:
            raise RunFailed(f"the OTLP receiver did not start; its log:\n{child.log_tail()}")
        time.sleep(0.05)
    run.otlp_endpoint = endpoint
    run.say(f"OTLP trace receiver: {run.otlp_endpoint} (OTLP/HTTP, protobuf or JSON)")
    serve = run.cfg.serve
    if serve is not None and serve.engine in ("vllm", "bundled"):
        run.say("  --serve: kvscope passes it to the server's command (--otlp-traces-endpoint)")
    elif run.cfg.target:
        run.say(
            "  point the server's span exporter at it, e.g. vLLM: --otlp-traces-endpoint "
            f"{run.otlp_endpoint} with {PROTOCOL_ENV}=http/protobuf (docs/spans.md)"
        )


def _endpoint(path: Path) -> str | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("endpoint")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def engine_flags(run: Run) -> list[str]:
    """The bundled engine's span flag, when the run receives spans."""
    return ["--otlp-traces-endpoint", run.otlp_endpoint] if run.otlp_endpoint else []


def engine_env(run: Run, env: dict[str, str] | None) -> dict[str, str] | None:
    """The bundled engine exports OTLP/HTTP, as vLLM does with this variable set."""
    if not run.otlp_endpoint:
        return env
    return {**(env if env is not None else os.environ), PROTOCOL_ENV: "http/protobuf"}


def _status(run: Run) -> dict:
    base = run.otlp_endpoint.rsplit("/v1/traces", 1)[0] if run.otlp_endpoint else ""
    status, body = procs.http_get(base + "/status", 1.0)
    try:
        return json.loads(body) if status == 200 else {}
    except ValueError:
        return {}


def expected_spans(run: Run) -> int:
    """Successful requests that carried a trace id: each should come back as one span."""
    n = 0
    path = run.paths["records"]
    if path.exists():
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                n += bool(row.get("ok") and row.get("trace_id"))
    return n


def wait_for_spans(run: Run) -> None:
    """After the load: wait until every successful request's span is in, or the grace
    period is over (no wait for a target that stopped answering: its queue died with it);
    then close the join (later spans are counted late)."""
    child = run.children.get("otlp")
    cfg = run.cfg.otlp
    if child is None or cfg is None:
        return
    if not child.running:
        run.notes.append(
            Finding(
                "otlp_receiver_exited",
                f"the OTLP receiver exited during the run (status {child.returncode}); see its log",
            )
        )
        run.say(f"warning: {run.notes[-1].text}")
        return
    want = expected_spans(run)
    deadline = time.monotonic() + cfg.grace_s
    got = int(_status(run).get("request_spans", 0))
    while got < want and time.monotonic() < deadline and not run.interrupts and run.target_answers:
        time.sleep(POLL_S)
        got = int(_status(run).get("request_spans", 0))
    child.send_signal(signal.SIGUSR1)
    if got < want:
        run.notes.append(
            Finding(
                "spans_missing",
                f"{want - got} of {want} successful requests had no server span within the "
                f"{cfg.grace_s:g} s grace period (--otlp-grace)",
            )
        )
        run.say(f"warning: {run.notes[-1].text}")


def stop_receiver(run: Run) -> None:
    child = run.children.get("otlp")
    if child is not None:
        child.stop(signal.SIGTERM, timeout_s=5.0)
