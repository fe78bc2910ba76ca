"""`kvscope engine serve --otlp-traces-endpoint`: vLLM's `llm_request` span per request, to the
real receiver, over the real OpenTelemetry SDK; `--no-kvscope-timing` leaves the SSE object out.
The simulator stands in for the model (the span code does not care which executor ran)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from harness.run.commands import engine_command
from harness.run.procs import free_port
from tests.harness.otlp.receiver import receiver
from tests.support.paths import ROOT
from tests.support.servers import server
from tests.support.wait import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
SIM = ["--simulate", "--sim-model", "llama-3.1-8b"]
TRACE, PARENT = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


def post(url: str, body: dict, headers: dict | None = None) -> tuple[bytes, dict]:
    req = urllib.request.Request(
        url + "/v1/completions",
        json.dumps({"prompt": "hello there", "max_tokens": 4, **body}).encode(),
        {"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read(), dict(resp.headers)


def wait_spans(r, n: int) -> list[dict]:
    return wait_until(r.spans, f"{n} spans at the receiver", 15, ok=lambda spans: len(spans) >= n)


def test_span_per_request_with_the_parent_from_traceparent_and_the_sse_object_off(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    with receiver(tmp_path / "otlp") as r:
        port = free_port()
        flags = [*SIM, "--otlp-traces-endpoint", r.endpoint, "--no-kvscope-timing"]
        with server(engine_command(None, flags, port), port, "/health", 120, tmp_path / "e.log") as url:
            stream, _ = post(url, {"stream": True}, {"traceparent": f"00-{TRACE}-{PARENT}-01"})
            whole, headers = post(url, {"temperature": 0.5})
            spans = wait_spans(r, 2)
    assert b"kvscope" not in stream and b"[DONE]" in stream
    assert "kvscope" not in json.loads(whole) and "x-kvscope-timing" not in {k.lower() for k in headers}
    assert len(spans) == 2
    traced = next(s for s in spans if s["trace_id"] == TRACE)
    assert traced["parent_span_id"] == PARENT and traced["name"] == "llm_request"
    assert traced["scope"] == "vllm.tracing.otel" and traced["completion_tokens"] == 4
    assert traced["request_id"].startswith("cmpl-")
    assert traced["queue_time_s"] + traced["prefill_time_s"] == pytest.approx(traced["ttft_s"], abs=2e-6)
    assert traced["end_unix"] >= traced["start_unix"] + traced["e2e_s"] - 1e-3
    root = next(s for s in spans if s["trace_id"] != TRACE)
    assert root["parent_span_id"] == ""  # no traceparent: a new root, as vLLM makes it
    assert "gen_ai.request.temperature" not in traced["attributes"]  # only the mapped names are listed


def test_the_sse_object_stays_by_default_and_equals_the_span(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    with receiver(tmp_path / "otlp") as r:
        port = free_port()
        flags = [*SIM, "--otlp-traces-endpoint", r.endpoint]
        with server(engine_command(None, flags, port), port, "/health", 120, tmp_path / "e.log") as url:
            whole, headers = post(url, {}, {"traceparent": f"00-{TRACE}-{PARENT}-01"})
            (span,) = wait_spans(r, 1)
    timing = json.loads(whole)["kvscope"]
    for key in ("queue_time_s", "prefill_time_s", "ttft_s", "decode_time_s", "e2e_s"):
        assert span[key] == pytest.approx(timing[key], abs=1e-9), key


@pytest.mark.parametrize("protocol", [None, "http/json"])
def test_an_exporter_that_cannot_be_made_fails_at_start(protocol, monkeypatch):
    """Unset (gRPC, vLLM's default) needs the gRPC exporter, which kvscope does not install;
    http/json is refused as vLLM refuses it."""
    env_protocol = {} if protocol is None else {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol}
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "reference_engine.server.serve_cli",
            *SIM,
            "--port",
            "0",
            "--otlp-traces-endpoint",
            "127.0.0.1:4317",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, **env_protocol},
    )
    assert out.returncode == 2, out.stderr
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" in out.stderr


def test_the_server_imports_no_opentelemetry_without_the_flag():
    code = (
        "import sys, reference_engine.server.app, reference_engine.server.serve_cli;"
        "sys.exit(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0
