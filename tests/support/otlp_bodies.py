"""A loopback OTLP/HTTP endpoint that keeps each POST exactly as it arrived: path, content
headers and body bytes (kvscope's own receiver, `harness.otlp`, decodes and maps instead).
Used to capture real vLLM exports (tests/fixtures/vllm-0.32-cpu/capture.py) and to hold the
bundled engine's spans to them. Answers every POST 200 with an empty protobuf body, which an
OTLP exporter reads as full success. Stdlib and opentelemetry-proto only.

    with otlp_bodies() as rec:
        rec.endpoint  # http://127.0.0.1:PORT/v1/traces
        rec.posts     # [Post(path, headers, body), ...]
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

KEPT_HEADERS = ("Content-Type", "Content-Encoding", "Content-Length", "User-Agent")


@dataclass(frozen=True, slots=True)
class Post:
    path: str
    headers: dict[str, str]
    body: bytes


def otlp_json(message: ExportTraceServiceRequest) -> dict:
    """An export request as OTLP/JSON: protobuf's JSON mapping with integer enums and hex
    trace and span ids (the OTLP spec's one departure from it)."""
    doc = MessageToDict(message, use_integers_for_enums=True)
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return doc


def spans(body: bytes) -> list[Span]:
    """Every span of one protobuf export body, in order."""
    message = ExportTraceServiceRequest.FromString(body)
    return [span for rs in message.resource_spans for ss in rs.scope_spans for span in ss.spans]


class OtlpBodies(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self._posts: list[Post] = []
        self._lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/v1/traces"

    @property
    def posts(self) -> list[Post]:
        with self._lock:
            return list(self._posts)

    def count(self, name: str) -> int:
        """Spans named `name` received so far."""
        return sum(s.name == name for post in self.posts for s in spans(post.body))

    def keep(self, post: Post) -> None:
        with self._lock:
            self._posts.append(post)


class _Handler(BaseHTTPRequestHandler):
    server: OtlpBodies
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k: self.headers[k] for k in KEPT_HEADERS if self.headers.get(k) is not None}
        self.server.keep(Post(self.path, headers, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()


@contextmanager
def otlp_bodies() -> Iterator[OtlpBodies]:
    rec = OtlpBodies()
    thread = threading.Thread(target=rec.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        rec.shutdown()
        rec.server_close()
        thread.join()
