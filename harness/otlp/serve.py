"""`python -m harness.otlp.serve`: the receiver as a process of its own (`kvscope run --otlp`
starts it; it also runs alone, e.g. in front of a server being tested by hand).

Files in --out: `spans.jsonl` (one `ServerSpan` per line, appended as bodies arrive),
`endpoint.json` (written once listening: the URL to give the server's exporter, which a
parent reads when it asked for port 0), `counts.json` (the counts by reason, written on
exit). Signals: SIGUSR1 closes the join (spans from then on count as late); SIGTERM or
SIGINT stops, writes counts.json, exits 0.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from exporter.units import host_port
from harness.otlp.http import DEFAULT_MAX_BODY_BYTES, TRACES_PATH, Receiver
from harness.otlp.sink import COUNTS_FILE, DEFAULT_MAX_SPANS, ENDPOINT_FILE, SPANS_FILE, SpanSink


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness.otlp.serve", description="OTLP/HTTP trace receiver (POST /v1/traces)"
    )
    p.add_argument("--listen", type=host_port, default=("127.0.0.1", 0), metavar="HOST:PORT")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--max-spans", type=int, default=DEFAULT_MAX_SPANS, metavar="N")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, metavar="N")
    return p


def endpoint_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{TRACES_PATH}"


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sink = SpanSink(out / SPANS_FILE, args.max_spans)
    try:
        server = Receiver(args.listen, sink, args.max_body_bytes)
    except OSError as exc:
        print(
            f"kvscope otlp: error: cannot listen on {args.listen[0]}:{args.listen[1]}: {exc}", file=sys.stderr
        )
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: sink.close())
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    url = endpoint_url(args.listen[0], server.server_address[1])
    partial = out / (ENDPOINT_FILE + ".part")  # renamed into place: a reader never sees half a file
    partial.write_text(json.dumps({"endpoint": url}) + "\n", encoding="utf-8")
    partial.replace(out / ENDPOINT_FILE)
    print(f"kvscope otlp: listening on {url}", flush=True)
    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    counts = sink.snapshot()
    sink.shutdown()
    (out / COUNTS_FILE).write_text(json.dumps(counts, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
