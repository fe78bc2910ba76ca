"""A plain Locust FastHttpUser that streams completions with `readline(b"\\n")` (the way to
read SSE with geventhttpclient that does not buffer) and writes one JSON line per request to
$PEER_RECORDS. Closed loop: each user sends when its previous answer is in.

    PEER_RECORDS=r.jsonl locust -f benchmarks/peers/locust_readline.py --headless --host URL \\
        -u 64 -r 64 -t 20s
"""

from __future__ import annotations

import os
import random
import time

from locust import FastHttpUser, events, task

from benchmarks.peers.request import Reading, body

OUT = os.environ.get("PEER_RECORDS", "records.jsonl")
MODEL = os.environ.get("PEER_MODEL", "default")
PROMPT_WORDS = int(os.environ.get("PEER_PROMPT_WORDS", "128"))
MAX_TOKENS = int(os.environ.get("PEER_MAX_TOKENS", "128"))
_file = open(OUT, "a", encoding="utf-8")  # noqa: SIM115 - closed at quit


@events.quitting.add_listener
def _close(**_) -> None:
    _file.close()


class PlainStreamingUser(FastHttpUser):
    network_timeout = 300.0
    connection_timeout = 10.0

    def on_start(self) -> None:
        self.rng = random.Random()

    @task
    def complete(self) -> None:
        payload = body(MODEL, PROMPT_WORDS, MAX_TOKENS, self.rng)
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        reading = Reading(time.perf_counter())
        with self.client.post(
            "/v1/completions", data=payload, headers=headers, stream=True, catch_response=True
        ) as resp:
            ok = resp.status_code == 200
            while ok:
                line = resp.stream.readline(b"\n")
                if not line or line.strip() == b"data: [DONE]":
                    break
                reading.line(line, time.perf_counter())
            resp.success() if ok else resp.failure(f"HTTP {resp.status_code}")
        _file.write(reading.record(ok) + "\n")
        _file.flush()
