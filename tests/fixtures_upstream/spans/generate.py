"""Capture real OTLP/HTTP export bodies of a span built exactly like vLLM's `llm_request`.

Usage (vLLM source is NOT part of this repository; point at an unpacked vLLM wheel):
    python generate.py VLLM_ROOT OUTDIR
Runs one child process per variant (the OpenTelemetry tracer provider is process-global):
plain protobuf and gzip protobuf, both through vLLM's own exporter selection.

What is vLLM's and what is stubbed:
- vllm/tracing/otel.py and vllm/tracing/utils.py are loaded unmodified; the span is made by
  their init_otel_tracer (OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf) and
  manual_instrument_otel, with the parent taken by extract_trace_context from a W3C
  traceparent, exactly as OutputProcessor.do_tracing calls them.
- Stubbed: vllm.logger.init_logger, vllm.utils.func_utils.run_once, and the gRPC exporter
  module (imported by otel.py, unused with http/protobuf).
- The attribute values are those do_tracing would compute for the request below (seconds).
The body is received by a loopback HTTP server in the parent; the JSON encoding is the same
request converted with opentelemetry-proto per the OTLP/JSON rules (hex ids, integer enums).
"""

import base64
import gzip
import http.server
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
import types

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
# engine-core monotonic stamps (seconds) as RequestStateStats would hold them
QUEUED, SCHEDULED, FIRST, LAST = 500.010, 500.060, 500.210, 501.410
FIRST_TOKEN_LATENCY = 0.215  # wall clock first token - arrival
E2E = 1.420  # iteration timestamp of the last output - arrival
# vLLM ends the span when the output processor handles the finished request ("now"), so the
# arrival is placed E2E before the child starts to keep end - start realistic.


def child(root, endpoint):
    for name in ("vllm", "vllm.utils", "vllm.tracing"):
        sys.modules[name] = types.ModuleType(name)
        sys.modules[name].__path__ = []
    import logging

    sys.modules["vllm.logger"] = types.SimpleNamespace(init_logger=logging.getLogger)
    sys.modules["vllm.utils.func_utils"] = types.SimpleNamespace(run_once=lambda f: f)
    grpc_mod = "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"
    sys.modules[grpc_mod] = types.SimpleNamespace(OTLPSpanExporter=None)
    for sub in ("utils", "otel"):
        spec = importlib.util.spec_from_file_location(f"vllm.tracing.{sub}", f"{root}/vllm/tracing/{sub}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[f"vllm.tracing.{sub}"] = mod
        spec.loader.exec_module(mod)
    otel, utils = sys.modules["vllm.tracing.otel"], sys.modules["vllm.tracing.utils"]
    assert otel.is_otel_available(), otel.otel_import_error_traceback
    A = utils.SpanAttributes
    otel.init_otel_tracer("vllm.llm_engine", endpoint)
    arrival = time.time() - E2E
    attributes = {
        A.GEN_AI_LATENCY_TIME_TO_FIRST_TOKEN: FIRST_TOKEN_LATENCY,
        A.GEN_AI_LATENCY_E2E: E2E,
        A.GEN_AI_LATENCY_TIME_IN_QUEUE: SCHEDULED - QUEUED,
        A.GEN_AI_USAGE_PROMPT_TOKENS: 96,
        A.GEN_AI_USAGE_COMPLETION_TOKENS: 64,
        A.GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL: FIRST - SCHEDULED,
        A.GEN_AI_LATENCY_TIME_IN_MODEL_DECODE: LAST - FIRST,
        A.GEN_AI_LATENCY_TIME_IN_MODEL_INFERENCE: LAST - SCHEDULED,
        A.GEN_AI_REQUEST_ID: "chatcmpl-kvscope-0001",
        A.GEN_AI_REQUEST_TOP_P: 1.0,
        A.GEN_AI_REQUEST_MAX_TOKENS: 64,
        A.GEN_AI_REQUEST_TEMPERATURE: 0.7,
        A.GEN_AI_REQUEST_N: 1,
    }
    otel.manual_instrument_otel(
        span_name="llm_request",
        start_time=int(arrival * 1e9),
        attributes=attributes,
        context=otel.extract_trace_context({"traceparent": TRACEPARENT}),
        kind=otel.SpanKind.SERVER,
    )
    otel.trace.get_tracer_provider().force_flush()


class Recorder(http.server.BaseHTTPRequestHandler):
    received = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Recorder.received.append((self.path, dict(self.headers), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def to_otlp_json(raw):
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    req.ParseFromString(raw)
    doc = json_format.MessageToDict(req, use_integers_for_enums=True)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return doc


def main(root, out):
    os.makedirs(out, exist_ok=True)
    server = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_port}/v1/traces"
    for name, compression in (("llm_request", None), ("llm_request.gzip", "gzip")):
        env = dict(os.environ, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf")
        env.pop("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", None)
        if compression:
            env["OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"] = compression
        subprocess.run([sys.executable, __file__, "--child", root, endpoint], env=env, check=True)
        path, headers, body = Recorder.received[-1]
        with open(os.path.join(out, name + ".pb" + (".gz" if compression else "")), "wb") as f:
            f.write(body)
        raw = gzip.decompress(body) if compression else body
        keep = {k: v for k, v in headers.items() if k.lower() in ("content-type", "content-encoding")}
        with open(os.path.join(out, name + ".request.json"), "w") as f:
            json.dump({"path": path, "headers": keep, "body_len": len(body)}, f, indent=1)
            f.write("\n")
        if not compression:
            with open(os.path.join(out, "llm_request.otlp.json"), "w") as f:
                json.dump(to_otlp_json(raw), f, indent=1)
                f.write("\n")
    server.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1], sys.argv[2])
