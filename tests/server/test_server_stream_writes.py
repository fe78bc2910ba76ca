"""How streamed chunks leave the server: written in the output processor's pass (the stream's
sink) as valid HTTP/1.1 chunks or, for HTTP/1.0, as the plain body; exactly one `[DONE]`, last;
every write's delay observed; and a client that stops reading gets its chunks through the
handler's draining write instead, complete and in order, once it reads again."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from reference_engine.server import streaming
from reference_engine.server.events import RequestStream
from tests.server.test_server_robustness import metric
from tests.support.tiny_server import MODEL, assert_no_leaked_blocks, start

DELAY_COUNT = "kvscope:stream_write_delay_seconds_count"


@pytest.fixture(scope="module")
def server():
    server = start(num_blocks=256, max_model_len=1024)
    yield server
    server.stop()


def raw_request(port: int, body: dict, version: str = "1.1", rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    data = json.dumps(body).encode()
    head = (
        f"POST /v1/completions HTTP/{version}\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    sock.sendall(head.encode() + data)
    return sock


def read_all(sock: socket.socket) -> bytes:
    sock.settimeout(60)
    parts = []
    while chunk := sock.recv(65536):
        parts.append(chunk)
    sock.close()
    return b"".join(parts)


def chunks_of(body: bytes) -> list[bytes]:
    """An HTTP/1.1 chunked body decoded strictly (every size line, CRLF and the last chunk):
    its chunks, one per write the server made."""
    out, pos = [], 0
    while True:
        end = body.index(b"\r\n", pos)
        size = int(body[pos:end], 16)
        start = end + 2
        assert body[start + size : start + size + 2] == b"\r\n", "a chunk not ended by CRLF"
        if size == 0:
            assert start + 2 == len(body), "bytes after the last chunk"
            return out
        out.append(body[start : start + size])
        pos = start + size + 2


def dechunk(body: bytes) -> bytes:
    return b"".join(chunks_of(body))


def events_of(sse: bytes) -> list[str]:
    assert sse.endswith(b"\n\n")
    return [e.removeprefix(b"data: ").decode() for e in sse[:-2].split(b"\n\n")]


def split_response(raw: bytes) -> tuple[str, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return head.decode(), body


def body(max_tokens: int, **extra) -> dict:
    return {
        "model": MODEL,
        "prompt": "Tell me",
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
        **extra,
    }


def check_tokens(events: list[str], max_tokens: int, n: int = 1) -> None:
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = [json.loads(e) for e in events[:-1]]
    per_choice = [[c for c in chunks if c["choices"] and c["choices"][0]["index"] == i] for i in range(n)]
    assert all(len(choice) == max_tokens for choice in per_choice), [len(c) for c in per_choice]
    assert all(choice[-1]["choices"][0]["finish_reason"] == "length" for choice in per_choice)
    assert "kvscope" in chunks[-1]


def test_http11_stream_is_valid_chunked_encoding_with_one_done_and_every_write_observed(server):
    before = metric(server, DELAY_COUNT)
    head, raw_body = split_response(read_all(raw_request(server.port, body(40))))
    assert head.startswith("HTTP/1.1 200") and "Transfer-Encoding: chunked" in head
    check_tokens(events_of(dechunk(raw_body)), 40)
    # Every write carried tokens (a step's, or several queued while the handler was busy) and
    # had its delay observed.
    assert metric(server, DELAY_COUNT) - before == len(chunks_of(raw_body))
    assert_no_leaked_blocks(server)


def test_http10_stream_is_the_plain_body_up_to_the_close(server):
    head, raw_body = split_response(read_all(raw_request(server.port, body(25), version="1.0")))
    assert head.startswith("HTTP/1.1 200") or head.startswith("HTTP/1.0 200")
    assert "chunked" not in head.lower()
    check_tokens(events_of(raw_body), 25)


def test_a_batch_never_overtakes_one_already_queued_for_the_handler():
    # The sink declined a batch (a full connection): it is queued and the sink dropped, so the
    # next batch queues behind it, though the connection would take it now, until the handler
    # has taken the queue and set its sink again.
    stream = RequestStream("r")
    taken, room = [], [False]
    sink = lambda produced, events: room[0] and (taken.append(events) or True)  # noqa: E731
    stream.sink = sink
    stream.put(1.0, ["first"])
    room[0] = True
    stream.put(2.0, ["second"])
    assert taken == [] and stream.sink is None
    assert [stream.queue.get_nowait()[1] for _ in range(2)] == [["first"], ["second"]]
    stream.sink = sink  # the handler drained the queue and waits again
    stream.put(3.0, ["third"])
    assert taken == [["third"]] and stream.queue.empty()


def test_a_handler_that_fell_behind_measures_from_the_oldest_tokens_the_core_made():
    # A handler reached in a burst finds `Admitted` (made by the server: 0.0) with the first
    # tokens queued behind it; their write delay counts from when the core made them.
    stream = RequestStream("r")
    stream.queue.put_nowait((0.0, ["admitted"]))
    stream.queue.put_nowait((2.0, ["first"]))
    stream.queue.put_nowait((3.0, ["second"]))
    assert asyncio.run(stream.next_events()) == ["admitted", "first", "second"]
    assert stream.produced == 2.0


def test_a_client_that_stops_reading_gets_every_chunk_in_order_through_the_handler(server, monkeypatch):
    handler_writes = []
    write, init = streaming._SseWriter.write, streaming._SseWriter.__init__

    async def counting_write(self, produced, events):
        if events:
            handler_writes.append(len(events))
        await write(self, produced, events)

    def small_send_buffer(self, request, *args):
        # A slow path between server and client: without this, loopback's send buffer grows to
        # megabytes and holds a whole stream, so the server's own buffer would never fill.
        request.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        init(self, request, *args)

    monkeypatch.setattr(streaming._SseWriter, "write", counting_write)
    monkeypatch.setattr(streaming._SseWriter, "__init__", small_send_buffer)
    # 4 choices with 5 logprobs each: ~1.5 KB a step, 450 KB in all, far more than the 64 KB the
    # direct path lets wait on a connection.
    sock = raw_request(server.port, body(300, n=4, logprobs=5), rcvbuf=4096)
    deadline = time.monotonic() + 30
    while not handler_writes and time.monotonic() < deadline:
        time.sleep(0.05)  # the client reads nothing until the handler had to write
    head, raw_body = split_response(read_all(sock))
    assert head.startswith("HTTP/1.1 200")
    check_tokens(events_of(dechunk(raw_body)), 300, n=4)
    assert handler_writes, "the direct path never declined, so the draining write was not tested"
    assert_no_leaked_blocks(server)
