"""Getting every request record from the workers to the master, and nothing twice.

Records ride Locust's own worker->master messaging (`runner.send_message`, received with
`runner.register_message`), batched so a busy worker sends a few messages a second rather
than one per request; distributed runs, local `kvscope run` workers and remote `kvscope
worker` machines therefore need no other channel. In a single-process run (LocalRunner)
`send_message` calls the listener directly, so the same code path writes the file.

End of a run — the drain. Locust stops users by killing their greenlets: a request in
flight would vanish from Locust's statistics and from the records while the server counts
it as an abort, and in a distributed run the master quits 0.5 s after telling the workers
to, before their last batch arrives. So on `test_stopping` (fired before any user is
stopped) the master tells every worker to drain: users stop starting requests, the
in-flight ones finish (up to --drain-timeout; the worker ends any still running then, and
records them as "aborted"), the last batch and Locust's stats are sent, then the worker
acknowledges. The master waits for every acknowledgement (bounded), then lets
Locust stop. Message order on the worker->master socket guarantees the records arrive
before the acknowledgement.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import IO, Any

import gevent
import msgspec

log = logging.getLogger("kvscope.records")

RECORDS_MSG = "kvscope_records"
DRAIN_MSG = "kvscope_drain"
DRAINED_MSG = "kvscope_drained"
ABORT_MSG = "kvscope_abort"  # stop at once (a second Ctrl-C): record in-flight requests as aborted
BATCH_SIZE = 200
FLUSH_INTERVAL_S = 0.5


@dataclass(slots=True)
class RecordSender:
    """Worker side: buffer records, flush every FLUSH_INTERVAL_S or BATCH_SIZE records."""

    runner: Any
    worker_id: str
    buffer: list[dict] = field(default_factory=list)
    sent: int = 0

    def add(self, record: dict) -> None:
        self.buffer.append(record)
        if len(self.buffer) >= BATCH_SIZE:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        batch, self.buffer = self.buffer, []
        self.runner.send_message(RECORDS_MSG, {"worker_id": self.worker_id, "records": batch})
        self.sent += len(batch)

    def run_forever(self) -> None:
        while True:
            gevent.sleep(FLUSH_INTERVAL_S)
            try:
                self.flush()
            except Exception:  # a transient RPC error must not kill the flusher
                log.exception("sending records to the master failed; will retry")


@dataclass(slots=True)
class RecordCollector:
    """Master side: append each batch to the records file (flushed per batch, so the
    harness can tail it live) and count per worker. `drained` collects acknowledgements."""

    path: str | None = None
    per_worker: dict[str, int] = field(default_factory=dict)
    total: int = 0
    drained: set[str] = field(default_factory=set)
    _file: IO[bytes] | None = None
    # NaN ("not measured") is encoded as null: standard JSON that any JSON-lines reader takes.
    # msgspec: the master writes every record of every worker (about 7x json.dumps's speed).
    _encode: Any = field(default_factory=lambda: msgspec.json.Encoder().encode)

    def open(self) -> None:
        if self.path and self._file is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self._file = open(self.path, "ab")  # noqa: SIM115 (closed in close())

    def on_records(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        data = msg.data or {}
        records = data.get("records") or []
        worker = str(data.get("worker_id", msg.node_id))
        if self._file is not None and records:
            self._file.write(b"".join(self._encode(r) + b"\n" for r in records))
            self._file.flush()
        self.per_worker[worker] = self.per_worker.get(worker, 0) + len(records)
        self.total += len(records)

    def on_drained(self, environment: Any = None, msg: Any = None, **_: Any) -> None:
        self.drained.add(str(msg.node_id))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def wait_until(predicate, timeout_s: float, step_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        gevent.sleep(step_s)
    return True


def write_status(path: str, status: dict) -> None:
    """Atomic rewrite (tmp + rename): a reader never sees half a file."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(status, f)
    os.replace(tmp, path)
