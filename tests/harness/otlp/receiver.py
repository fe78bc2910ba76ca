"""The real span receiver (`python -m harness.otlp.serve`) as a child process for tests."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import ROOT
from tests.support.prometheus import stop_process

FIXTURES = ROOT / "tests" / "fixtures" / "spans"


@dataclass
class Running:
    proc: subprocess.Popen
    endpoint: str
    out: Path

    @property
    def base(self) -> str:
        return self.endpoint.removesuffix("/v1/traces")

    def status(self) -> dict:
        with urllib.request.urlopen(self.base + "/status", timeout=5) as resp:
            return json.loads(resp.read())

    def post(self, body: bytes, content_type: str = "application/x-protobuf", **headers: str) -> int:
        req = urllib.request.Request(
            self.endpoint, data=body, headers={"Content-Type": content_type, **headers}, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, ConnectionError):
            return 0  # the receiver closed the connection while the body was still being sent

    def spans(self) -> list[dict]:
        path = self.out / "spans.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def peak_rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")


@contextmanager
def receiver(out: Path, *flags: str) -> Iterator[Running]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.otlp.serve", "--out", str(out), *flags],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not (out / "endpoint.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
            time.sleep(0.05)
        yield Running(proc, json.loads((out / "endpoint.json").read_text())["endpoint"], out)
    finally:
        stop_process(proc, 10)
