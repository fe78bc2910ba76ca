"""Malformed and slow clients against the real server (tiny-random engine), over raw sockets.

Framing errors get OpenAI's JSON error shape and at most one log line however many arrive;
slowloris connections, bodies shorter than their Content-Length and connections past the
cap are closed within their (here shortened) deadlines, while the server keeps answering.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import threading
import time

import pytest

from reference_engine.serve_options import HttpLimits
from reference_engine.server.log_limit import RateLimitedLog
from reference_engine.server.serve_cli import warn_if_few_file_descriptors
from tests.server.test_server_lifecycle import ServerProcess
from tests.support.tiny_server import MODEL, assert_no_leaked_blocks, post, start

LIMITS = HttpLimits(header_timeout_s=0.5, body_timeout_s=0.5, keep_alive_timeout_s=3.0, max_connections=64)
SLACK_S = 2.5  # a deadline is met within this much of its value on a loaded 2-core machine


@pytest.fixture(scope="module")
def server():
    s = start(LIMITS, num_blocks=64, max_model_len=64, max_num_seqs=4)
    yield s
    s.stop()


def exchange(port: int, *parts: bytes, gap_s: float = 0.0, timeout: float = 10.0) -> tuple[bytes, float]:
    """Send `parts` (with a pause between), read until the server closes; (bytes, seconds)."""
    start_t = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        for part in parts:
            sock.sendall(part)
            time.sleep(gap_s)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks), time.monotonic() - start_t


def json_error(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"application/json" in head.lower(), head
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and isinstance(error["message"], str)
    return status, error


FRAMING = {
    "garbage request line": (b"GARBAGE\r\n\r\n", 400),
    "control byte in the method": (b"GE\x01T / HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "unknown method": (b"BREW /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    "bad HTTP version": (b"GET / HTTP/9.9\r\nHost: x\r\n\r\n", 400),
    "oversized URL": (b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431),
    "oversized header": (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n", 431),
    "too many headers": (
        b"GET / HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(300)) + b"\r\n",
        431,
    ),
    "Content-Length and Transfer-Encoding": (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    "bad chunk size": (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz\r\nhi\r\n0\r\n\r\n",
        400,
    ),
    "negative Content-Length": (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        400,
    ),
    "TLS on the HTTP port": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40, 400),
}


@pytest.mark.parametrize("case", sorted(FRAMING))
def test_framing_errors_are_json_errors_and_close_the_connection(server, case):
    request, expected = FRAMING[case]
    raw, seconds = exchange(server.port, request)
    status, error = json_error(raw)
    assert status == expected, raw[:300]
    assert error["type"] == "invalid_request_error" and error["code"]
    assert seconds < SLACK_S  # answered at once, not at a timeout


def test_a_chunk_refused_half_way_through_a_body_is_answered_at_once(server):
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n"
    raw, seconds = exchange(server.port, head, b"zz\r\n", gap_s=0.1)
    status, error = json_error(raw)
    assert status == 400 and "chunk" in error["message"]
    assert seconds < LIMITS.body_timeout_s + 0.2 + SLACK_S / 2


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_flood_of_malformed_requests_leaves_one_log_line(server):
    handler = Records()
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        for i in range(120):
            request, _ = FRAMING[sorted(FRAMING)[i % len(FRAMING)]]
            exchange(server.port, request)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    lines = [r for r in handler.records if r.levelno >= logging.INFO]
    assert len(lines) <= 1, [r.getMessage() for r in lines]  # the test takes well under 10 s
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in handler.records)
    assert not [r for r in handler.records if r.levelno >= logging.ERROR]
    assert post(server, "/v1/completions", json.dumps({"prompt": "hi", "max_tokens": 2}).encode())[0] == 200


def test_rate_limited_log_counts_what_it_left_out():
    lines: list[str] = []

    class Sink(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("kvscope.test.ratelimit")
    logger.addHandler(Sink())
    logger.propagate = False
    now = [100.0]
    limited = RateLimitedLog(logger, interval_s=10.0, clock=lambda: now[0])
    assert limited.warning("bad request from %s", "a")
    for _ in range(5):
        now[0] += 1
        assert not limited.warning("bad request from %s", "b")
    now[0] += 5  # 10 s after the first line
    assert limited.warning("bad request from %s", "c")
    assert lines == [
        "bad request from a",
        "bad request from c (and 5 more like it since the last one logged)",
    ]


def _slowloris(port: int, results: list[float], stop: threading.Event) -> None:
    """Trickle a header line every 100 ms, never finishing the headers; record when the
    server closed the connection."""
    start_t = time.monotonic()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        i = 0
        while not stop.is_set():
            try:
                sock.sendall(b"X-%d: y\r\n" % i)
            except OSError:
                break
            i += 1
            time.sleep(0.1)
            sock.setblocking(False)
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                data = None
            finally:
                sock.setblocking(True)
            if data is not None:  # the 408, or b"" at close
                break
        results.append(time.monotonic() - start_t)
    finally:
        sock.close()


def test_slowloris_connections_are_closed_at_the_header_deadline(server):
    results: list[float] = []
    stop = threading.Event()
    threads = [threading.Thread(target=_slowloris, args=(server.port, results, stop)) for _ in range(40)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    status, _ = post(server, "/v1/completions", json.dumps({"prompt": "hi", "max_tokens": 2}).encode())
    assert status == 200  # served while the slow clients hold their connections
    for t in threads:
        t.join(LIMITS.header_timeout_s + SLACK_S + 5)
    stop.set()
    assert len(results) == 40
    assert max(results) < LIMITS.header_timeout_s + SLACK_S, sorted(results)[-5:]


def test_a_body_shorter_than_its_content_length_gets_a_408(server):
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b'Content-Length: 200\r\n\r\n{"prompt": "hi", '
    )
    raw, seconds = exchange(server.port, request)
    status, error = json_error(raw)
    assert status == 408 and error["code"] == "request_timeout"
    assert LIMITS.body_timeout_s - 0.05 < seconds < LIMITS.body_timeout_s + SLACK_S
    assert_no_leaked_blocks(server)


def test_an_idle_connection_gets_a_408_at_the_header_deadline(server):
    raw, seconds = exchange(server.port)
    status, error = json_error(raw)
    assert status == 408 and "headers" in error["message"]
    assert seconds < LIMITS.header_timeout_s + SLACK_S


def test_keep_alive_outlives_the_header_deadline_until_its_own_timeout(server):
    """The header deadline starts at a request's first byte, so an idle keep-alive
    connection is kept for keep_alive_timeout_s, not header_timeout_s."""
    get = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(get)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(LIMITS.header_timeout_s * 3)  # idle past the header deadline
        sock.sendall(get)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        start_t = time.monotonic()
        assert sock.recv(65536) == b""  # closed by the keep-alive timeout
        assert (
            LIMITS.keep_alive_timeout_s - 0.3
            < time.monotonic() - start_t
            < LIMITS.keep_alive_timeout_s + SLACK_S
        )


def test_connections_past_the_cap_get_a_503_and_the_server_recovers():
    limits = HttpLimits(header_timeout_s=30, body_timeout_s=30, keep_alive_timeout_s=30, max_connections=8)
    s = start(limits, num_blocks=32, max_model_len=64, max_num_seqs=2)
    try:
        held = [socket.create_connection(("127.0.0.1", s.port), timeout=10) for _ in range(8)]
        time.sleep(0.2)
        raw, seconds = exchange(s.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        status, error = json_error(raw)
        assert status == 503 and error["code"] == "too_many_connections" and seconds < SLACK_S
        for sock in held:
            sock.close()
        body = json.dumps({"model": MODEL, "prompt": "hi", "max_tokens": 2}).encode()
        deadline = time.monotonic() + 5
        while (status := post(s, "/v1/completions", body)[0]) != 200 and time.monotonic() < deadline:
            time.sleep(0.05)  # the server sees the closes a moment later
        assert status == 200
    finally:
        s.stop()


@pytest.mark.parametrize(
    "field", ["header_timeout_s", "body_timeout_s", "keep_alive_timeout_s", "max_connections"]
)
def test_limits_must_be_positive(field):
    with pytest.raises(ValueError, match="must be positive"):
        HttpLimits(**{field: 0})


def test_the_serve_command_applies_its_limit_flags():
    """The flags reach the server the command runs (ServeOptions -> HttpLimits -> runner)."""
    server = ServerProcess(
        "--model",
        "tiny-random",
        "--num-blocks",
        "32",
        "--max-model-len",
        "64",
        "--header-timeout",
        "1.5",
        "--max-connections",
        "2",
    )
    try:
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(2)]
        time.sleep(0.1)
        raw, _ = exchange(server.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert json_error(raw)[0] == 503
        for sock in held:
            sock.close()
        time.sleep(0.2)
        raw, seconds = exchange(server.port)
        assert json_error(raw)[0] == 408 and 1.4 < seconds < 1.5 + SLACK_S
    finally:
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait() == 0


def test_a_connection_cap_above_the_open_file_limit_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING, "kvscope.server"):
        warn_if_few_file_descriptors(10**9)
    assert "ulimit -n" in caplog.text
