"""An HTTP/1.1 server with keep-alive that fails the way real servers do at the connection
level, which no real engine shows on demand: for the client's timeout and retry handling.

Run as `python -m tests.support.http_faults PORT MODE`; modes for POST /v1/chat/completions
and /v1/completions (GET /health, /v1/models and /metrics always answer):
- ok: a short SSE answer (5 chunks, usage, [DONE]) with Content-Length, connection kept;
- stale: like ok, but a request arriving on a connection idle for IDLE_S or more since its
  last response is met by closing the connection without a byte. That is the race a
  client loses against llama-server's 5 s keep-alive timeout (the server closed just as
  the request went out), made deterministic;
- hang: reads the request and never answers;
- drop: sends the headers and part of the body, then closes (bytes arrived: not retryable);
- stall: streams (chunked) the first two events, then sends nothing more;
- trickle: streams (chunked) every event TRICKLE_S after the one before, the whole answer
  taking longer than a short --request-timeout while no single wait does.

Written on asyncio streams rather than aiohttp, because aiohttp's server cannot close a
connection on a request's arrival without answering.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

IDLE_S = 0.3
TRICKLE_S = 0.4
MODEL = "faults"


def _sse(chat: bool) -> bytes:
    def chunk(text: str, finish: str | None) -> dict:
        choice = {"index": 0, "finish_reason": finish}
        choice.update({"delta": {"content": text}} if chat else {"text": text})
        return {"id": "x", "choices": [choice]}

    events = [chunk(f"t{i} ", "length" if i == 4 else None) for i in range(5)]
    events.append({"id": "x", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 5}})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


def _events(chat: bool) -> list[bytes]:
    return [event + b"\n\n" for event in _sse(chat).split(b"\n\n") if event]


async def _stream(
    writer: asyncio.StreamWriter, events: list[bytes], pause_s: float, end: bool = True
) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    for event in events:
        writer.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
        await writer.drain()
        await asyncio.sleep(pause_s)
    if end:
        writer.write(b"0\r\n\r\n")


def _response(status: str, body: bytes, ctype: str) -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = next(
        (int(v) for k, _, v in (h.partition(":") for h in lines[1:]) if k.lower() == "content-length"), 0
    )
    if length:
        await reader.readexactly(length)
    return method, path


def make_handler(mode: str):
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        answered_at: float | None = None
        try:
            while (request := await _read_request(reader)) is not None:
                method, path = request
                if method == "GET":
                    body = {"/v1/models": json.dumps({"data": [{"id": MODEL}]}).encode()}.get(path, b"ok\n")
                    writer.write(_response("200 OK", body, "application/json"))
                elif mode == "stale" and answered_at is not None and time.monotonic() - answered_at >= IDLE_S:
                    break  # closed without a byte: the idle timeout won the race
                elif mode == "hang":
                    await asyncio.sleep(3600)
                elif mode == "stall":
                    await _stream(writer, _events(path.endswith("chat/completions"))[:2], 0.0, end=False)
                    await asyncio.sleep(3600)
                elif mode == "trickle":
                    await _stream(writer, _events(path.endswith("chat/completions")), TRICKLE_S)
                elif mode == "drop":
                    full = _response("200 OK", _sse(path.endswith("chat/completions")), "text/event-stream")
                    writer.write(full[: len(full) // 2])
                    await writer.drain()
                    break
                else:
                    writer.write(
                        _response("200 OK", _sse(path.endswith("chat/completions")), "text/event-stream")
                    )
                await writer.drain()
                answered_at = time.monotonic()
        finally:
            writer.close()

    return handle


async def main(port: int, mode: str) -> None:
    server = await asyncio.start_server(make_handler(mode), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
