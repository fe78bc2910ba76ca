"""Runs `stream_body_cases.py` (the body reader on real sockets) in a pytest process of its
own: it imports Locust, whose gevent monkey-patching must not reach this process's other tests."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CASES = Path(__file__).with_name("stream_body_cases.py")
ROOT = Path(__file__).resolve().parents[3]


def test_the_body_reader_cases_pass_in_a_process_of_their_own() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(CASES), "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "-W", "ignore::DeprecationWarning"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"\b6 passed", result.stdout), result.stdout[-2000:]
