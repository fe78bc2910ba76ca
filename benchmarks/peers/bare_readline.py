"""The floor: N gevent greenlets that stream the same completions with geventhttpclient and
`readline(b"\\n")` and do nothing else per line but stamp the time of each `data:` line (no
JSON decoding, no Locust, no records until the run is over). It is what any gevent client
must pay per streamed chunk; the records are written after the deadline, outside the
measured window.

    python -m benchmarks.peers.bare_readline --url URL --model M --streams 64 --duration 20 --out r.jsonl

Without decoding it cannot tell a token chunk from the final usage chunk: its
`output_tokens` counts `data:` lines, and its gaps include the one before the usage chunk.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

import gevent  # noqa: E402
from geventhttpclient import HTTPClient  # noqa: E402

from benchmarks.peers.request import body, client_args  # noqa: E402

HEADERS = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
DATA, DONE = b"data:", b"data: [DONE]\n"


def stream_loop(client: HTTPClient, args, deadline: float, out: list) -> None:
    rng = random.Random()
    while time.perf_counter() < deadline:
        payload = body(args.model, args.prompt_words, args.max_tokens, rng)
        start, stamps = time.perf_counter(), []
        try:
            resp = client.post("/v1/completions", payload, headers=HEADERS)
            ok = resp.status_code == 200
            readline = resp.readline
            while ok:
                line = readline(b"\n")
                if not line or line == DONE:
                    break
                if line.startswith(DATA):
                    stamps.append(time.perf_counter())
            resp.read()  # the chunked body's end, so the connection goes back to the pool
            resp.release()
        except OSError:
            ok = False
        out.append((start, stamps, ok))


def main() -> None:
    args = client_args(__doc__.splitlines()[0])
    url = urlsplit(args.url)
    client = HTTPClient(url.hostname, url.port, concurrency=args.streams, network_timeout=300.0,
                        connection_timeout=10.0)  # fmt: skip
    deadline = time.perf_counter() + args.duration
    done: list = []
    gevent.joinall([gevent.spawn(stream_loop, client, args, deadline, done) for _ in range(args.streams)])
    with open(args.out, "w", encoding="utf-8") as f:
        for start, stamps, ok in done:
            row = {
                "ok": ok and bool(stamps),
                "ttft_s": stamps[0] - start if stamps else None,
                "itl_s": [b - a for a, b in zip(stamps, stamps[1:])],
                "output_tokens": len(stamps),
                "server_ttft_s": None,
            }
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
