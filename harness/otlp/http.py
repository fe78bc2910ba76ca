"""The OTLP/HTTP endpoint: POST /v1/traces (protobuf or JSON, identity or gzip/deflate),
GET /status (the sink's counts, for `kvscope run`), on a stdlib threading HTTP server.

What a body may cost (every refusal is counted by `SpanSink.refuse` and answered with the
status the OTLP spec gives non-retryable errors, so a well-behaved exporter does not resend):
- a declared Content-Length over `max_body_bytes`: 413 "oversized", nothing read (the
  connection is closed; a client still sending may see that instead of the 413);
- no Content-Length (chunked): 411, counted "malformed";
- decompressed size over `max_body_bytes` (a gzip bomb): 413 "gzip_bomb", stopped while
  inflating (`exporter.inflate.CappedBody`: at most the cap plus one step in memory);
- a body that does not parse: 400 "malformed"; a Content-Type other than protobuf or JSON:
  415 "unsupported_media";
- more than MAX_CONCURRENT bodies at once: the next waits BUSY_WAIT_S, then 503 "busy"
  (retryable: the exporter sends it again later).
A connection idle for SOCKET_TIMEOUT_S is closed, so slow clients cannot hold threads.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from exporter.inflate import CappedBody
from harness.otlp.decode import MalformedBody, media_type, parse, raw_spans, response_body
from harness.otlp.sink import SpanSink

TRACES_PATH = "/v1/traces"
STATUS_PATH = "/status"
DEFAULT_MAX_BODY_BYTES = 16 << 20  # a vLLM batch of 512 spans is ~300 KB
MAX_CONCURRENT = 4
BUSY_WAIT_S = 5.0
SOCKET_TIMEOUT_S = 10.0
READ_CHUNK = 1 << 16


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], sink: SpanSink, max_body_bytes: int) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, Handler)
        self.sink = sink
        self.max_body_bytes = max_body_bytes
        self.slots = threading.BoundedSemaphore(MAX_CONCURRENT)


class Handler(BaseHTTPRequestHandler):
    server: Receiver
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass  # one line per export would drown the log; the counts say what happened

    def _answer(self, status: int, body: bytes = b"", content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self, reason: str, status: int, message: str) -> None:
        self.server.sink.refuse(reason)
        self.close_connection = True  # the unread rest of the body must not be taken for a request
        self._answer(status, message.encode() + b"\n")

    def do_GET(self) -> None:
        if self.path != STATUS_PATH:
            self._answer(404, b"not found\n")
            return
        self._answer(200, json.dumps(self.server.sink.snapshot()).encode(), "application/json")

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != TRACES_PATH:
            self._refuse("not_found", 404, f"only POST {TRACES_PATH}")
            return
        media = media_type(self.headers.get("Content-Type", ""))
        if media is None:
            self._refuse(
                "unsupported_media", 415, "Content-Type must be application/x-protobuf or application/json"
            )
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            self._refuse("malformed", 411, "Content-Length required")
            return
        cap = self.server.max_body_bytes
        if int(length) > cap:
            self._refuse("oversized", 413, f"body over {cap} bytes")
            return
        if not self.server.slots.acquire(timeout=BUSY_WAIT_S):
            self._refuse("busy", 503, "busy")
            return
        try:
            self._receive(int(length), media, cap)
        finally:
            self.server.slots.release()

    def _discard(self, left: int) -> None:
        """Read the rest of a refused body and drop it, so the client gets the answer
        instead of a broken pipe while it is still sending."""
        while left > 0 and (chunk := self.rfile.read(min(READ_CHUNK, left))):
            left -= len(chunk)

    def _receive(self, length: int, media: str, cap: int) -> None:
        body = CappedBody(self.headers.get("Content-Encoding", ""), cap)
        left = length
        while left > 0:
            chunk = self.rfile.read(min(READ_CHUNK, left))
            if not chunk:
                self._refuse("malformed", 400, "body shorter than its Content-Length")
                return
            left -= len(chunk)
            if body.feed(chunk) is not None:
                self._discard(left)  # at most the cap on the wire, none of it kept
                break  # finish() returns the error
        result = body.finish()
        if not isinstance(result, bytes):
            reason = "gzip_bomb" if result.reason == "too_large" else "malformed"
            self._refuse(reason, 413 if reason == "gzip_bomb" else 400, result.detail)
            return
        try:
            spans = raw_spans(parse(result, media))
        except MalformedBody as exc:
            self._refuse("malformed", 400, f"not an OTLP trace export: {exc}")
            return
        del result
        self.server.sink.add(spans)
        self._answer(200, *response_body(media))
