"""The span receiver process against real export bodies (tests/fixtures/spans: vLLM's own
tracing code through the OpenTelemetry SDK) and hostile ones: every body and span lands in
exactly one count, the process stays up and answers, and its memory stays bounded."""

from __future__ import annotations

import json
import signal
import socket
import time
import zlib

import pytest

from tests.harness.otlp.receiver import FIXTURES, receiver

pytestmark = pytest.mark.timeout(120)
PB = (FIXTURES / "llm_request.pb").read_bytes()
GZ = (FIXTURES / "llm_request.gzip.pb.gz").read_bytes()
JSON_BODY = (FIXTURES / "llm_request.otlp.json").read_bytes()
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_protobuf_gzip_and_json_bodies_are_kept_once_each(tmp_path):
    with receiver(tmp_path) as r:
        assert r.post(PB) == 200
        assert r.post(GZ, **{"Content-Encoding": "gzip"}) == 200
        assert r.post(JSON_BODY, "application/json") == 200  # the same span as PB: a duplicate
        status = r.status()
        spans = r.spans()
    assert status["spans_kept"] == 2 and status["request_spans"] == 2 and status["spans_duplicate"] == 1
    assert {s["trace_id"] for s in spans} == {TRACE}
    first = spans[0]
    assert first["parent_span_id"] == "00f067aa0ba902b7" and first["engine_format"] == "vllm"
    assert first["queue_time_s"] == pytest.approx(0.05) and first["ttft_s"] == pytest.approx(0.215)
    assert first["e2e_s"] == pytest.approx(1.42) and first["decode_time_s"] == pytest.approx(1.2)
    assert first["prompt_tokens"] == 96 and first["completion_tokens"] == 64
    assert first["request_id"] == "chatcmpl-kvscope-0001"


def test_hostile_bodies_are_counted_by_reason_and_the_receiver_stays_up(tmp_path):
    cap = 1 << 20
    bomb = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb_body = b"".join(bomb.compress(b"\0" * (1 << 20)) for _ in range(512)) + bomb.flush()  # 512 MiB
    assert len(bomb_body) < cap  # small on the wire: only inflating finds it out
    with receiver(tmp_path, "--max-body-bytes", str(cap)) as r:
        assert r.post(b"\x0a\xff\xff\xff\xff\x0f garbage") == 400  # malformed protobuf
        assert r.post(b'{"resourceSpans": [{"scopeSpans": 7}]}', "application/json") == 400
        assert r.post(b"[" * 100_000 + b"]" * 100_000, "application/json") == 400  # nesting bomb
        assert r.post(b"\0" * (cap + 1)) in (413, 0)  # oversized by Content-Length: refused unread
        assert r.post(bomb_body, **{"Content-Encoding": "gzip"}) == 413
        assert r.post(PB, "text/plain") == 415
        assert r.post(PB) == 200  # still working after all of that
        assert r.post(PB) == 200  # an exporter's retry: duplicate
        r.proc.send_signal(signal.SIGUSR1)  # the run's grace period is over
        deadline = time.monotonic() + 5
        while not r.status()["closed"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert r.post(GZ, **{"Content-Encoding": "gzip"}) == 200  # a new span, after the grace: late
        status = r.status()
        peak_mib = r.peak_rss_kib() / 1024
        assert r.proc.poll() is None
    assert status["bodies_malformed"] >= 3 and status["bodies_oversized"] == 1
    assert status["bodies_gzip_bomb"] == 1 and status["bodies_unsupported_media"] == 1
    assert status["spans_kept"] == 1 and status["spans_duplicate"] == 1 and status["spans_late"] == 1
    # The bomb inflates to 512 MiB; the receiver held at most its 1 MiB cap plus one step.
    assert peak_mib < 150, peak_mib
    counts = json.loads((tmp_path / "counts.json").read_text())  # written at exit
    assert counts["spans_late"] == 1 and counts["closed"] is True


def test_span_cap_bounds_what_is_kept(tmp_path):
    with receiver(tmp_path, "--max-spans", "1") as r:
        assert r.post(PB) == 200
        assert r.post(GZ, **{"Content-Encoding": "gzip"}) == 200  # another span id: over the cap
        status = r.status()
    assert status["spans_kept"] == 1 and status["spans_over_cap"] == 1 and len(r.spans()) == 1


def test_a_truncated_body_and_a_silent_client_do_not_hold_the_receiver(tmp_path):
    with receiver(tmp_path) as r:
        host, port = r.endpoint.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                b"Content-Length: 1000\r\n\r\npartial"
            )
            assert r.post(PB) == 200  # another connection is served meanwhile
        assert r.status()["spans_kept"] == 1
