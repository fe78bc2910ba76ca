"""The load generator's body reader on real sockets (gevent, geventhttpclient's parser, no
Locust): the same records as the reference line reader over the same streamed answer, chunks
timed as they arrive, `--request-timeout` as "that long without a byte" (a silent server is
timed out, a slow one that keeps sending is not), and a failed read closes the connection.

Importing `harness.load` imports Locust, which monkey-patches the process for gevent, so these
cases run in a pytest process of their own (`test_stream_body.py` starts it)."""

from __future__ import annotations

import time
from pathlib import Path

import gevent
import gevent.socket
import pytest
from geventhttpclient.response import HTTPSocketResponse

from harness.load.stream_body import read_stream
from harness.workload.record import RequestRecord
from harness.workload.sse import StreamState, consume, finish

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "engine" / "chat_stream_include_usage.sse"
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
PAUSE_S = 0.02


def _events() -> list[bytes]:
    return [e + b"\n\n" for e in RECORDED.read_bytes().split(b"\n\n") if e.strip()]


def _serve(sock, events: list[bytes], pause_s: float, stall_after: int | None = None) -> None:
    sock.sendall(HEAD)
    for i, event in enumerate(events):
        if stall_after is not None and i == stall_after:
            gevent.sleep(3600)
        sock.sendall(f"{len(event):x}\r\n".encode() + event + b"\r\n")
        gevent.sleep(pause_s)
    sock.sendall(b"0\r\n\r\n")


def _read(
    reader, events: list[bytes], pause_s: float = PAUSE_S, stall_after: int | None = None, timeout_s=5.0
):
    """Serve `events` on one end of a socket pair and read them on the other with `reader`
    ("fast" or "reference"): (record as a dict, state, client socket, error raised)."""
    server, client = gevent.socket.socketpair()
    client.settimeout(30.0)
    writer = gevent.spawn(_serve, server, events, pause_s, stall_after)
    resp = HTTPSocketResponse(client)
    state, rec = StreamState(start=time.perf_counter()), RequestRecord("w-1", "w", "chat", "chat", 0.0)
    error = None
    try:
        if reader == "fast":
            read_stream(resp, time.perf_counter, state, rec, timeout_s)
        else:
            consume(resp.readline, time.perf_counter, state, rec)
    except Exception as exc:  # noqa: BLE001 - the tests look at what was raised
        error = exc
        state.end = time.perf_counter()
    finish(state, rec)
    writer.kill()
    server.close()
    return rec.to_dict(), state, client, error


def test_the_socket_reader_makes_the_reference_record_with_gaps_as_they_arrived() -> None:
    events = _events()
    fast, _, _, error = _read("fast", events)
    ref, _, _, ref_error = _read("reference", events)
    assert error is None and ref_error is None
    untimed = {"ttft_s", "e2e_s", "itl_s", "server_queue_time_s"}
    assert {k: v for k, v in fast.items() if k not in untimed} == {
        k: v for k, v in ref.items() if k not in untimed
    }
    assert fast["ok"] and fast["num_chunks"] == 12 and fast["output_tokens"] == 12
    assert len(fast["itl_s"]) == len(ref["itl_s"]) == 11
    # every chunk was stamped when it came, PAUSE_S after the one before
    assert all(PAUSE_S * 0.7 < gap < PAUSE_S * 5 for gap in fast["itl_s"]), fast["itl_s"]


def test_a_server_that_goes_silent_mid_stream_is_timed_out_and_the_connection_closed() -> None:
    started = time.perf_counter()
    rec, state, client, error = _read("fast", _events(), pause_s=0.0, stall_after=3, timeout_s=0.4)
    waited = time.perf_counter() - started
    assert isinstance(error, TimeoutError) and "no byte from the server" in str(error)
    assert 0.35 < waited < 2.0, waited
    assert state.first_token_at is not None and rec["num_chunks"] == 3  # what came before the silence
    assert client.fileno() == -1  # closed, so it can never go back to a pool half read


def test_a_slow_server_that_keeps_sending_is_not_timed_out() -> None:
    """14 events 0.1 s apart take 1.4 s: far past a 0.3 s timeout, never in one wait."""
    rec, _, client, error = _read("fast", _events(), pause_s=0.1, timeout_s=0.3)
    assert error is None and rec["ok"] and rec["e2e_s"] > 1.0
    assert client.gettimeout() == 30.0  # the socket's own timeout is back for the next request


@pytest.mark.parametrize("cut", [1, 5])
def test_a_connection_closed_mid_stream_is_an_error_not_a_hang(cut: int) -> None:
    server, client = gevent.socket.socketpair()
    events = _events()

    def serve_then_close() -> None:
        server.sendall(HEAD + b"".join(f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events[:cut]))
        server.close()

    gevent.spawn(serve_then_close)
    resp = HTTPSocketResponse(client)
    state, rec = StreamState(start=time.perf_counter()), RequestRecord("w-1", "w", "chat", "chat", 0.0)
    with gevent.Timeout(5.0), pytest.raises(Exception) as raised:
        read_stream(resp, time.perf_counter, state, rec, 5.0)
    assert not isinstance(raised.value, gevent.Timeout)
    assert client.fileno() == -1


def test_a_tls_stream_is_read_through_its_own_recv(tmp_path) -> None:
    """TLS bytes must be decrypted: the reader uses the SSL socket's recv, same record."""
    import subprocess

    import gevent.ssl

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    server_ctx = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = gevent.ssl.SSLContext(gevent.ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(cert)
    plain_server, plain_client = gevent.socket.socketpair()
    events = _events()

    def serve() -> None:
        _serve(server_ctx.wrap_socket(plain_server, server_side=True), events, 0.0)

    writer = gevent.spawn(serve)
    client = client_ctx.wrap_socket(plain_client, server_hostname="localhost")
    assert type(client) is not gevent.socket.socket
    resp = HTTPSocketResponse(client)
    state, rec = StreamState(start=time.perf_counter()), RequestRecord("w-1", "w", "chat", "chat", 0.0)
    read_stream(resp, time.perf_counter, state, rec, 5.0)
    finish(state, rec)
    writer.join(5)
    assert rec.ok and rec.num_chunks == 12 and rec.output_tokens == 12 and state.done
