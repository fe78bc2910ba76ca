"""A real vLLM (0.32's CPU build) for tests: `python -m vllm.entrypoints.openai.api_server` from
the venv `scripts/setup_vllm.sh` installs (`.venv-vllm`), serving SmolLM2-135M-Instruct from
the Hugging Face folder that script converts, on a free loopback port, stopped by pid (its
whole process group: vLLM's engine core is a child process) when the block exits.

    with vllm_server(tmp_path, "--num-gpu-blocks-override", "10") as server:
        server.url, server.model  # http://127.0.0.1:PORT, the served model name

Defaults are the suite's: one OpenMP thread, unbound (the cores are shared), 1 GiB of KV
cache space, `--max-model-len 1024` (so a 10-block pool of 128-token blocks can start), bf16,
offline Hugging Face. Start-up takes 1.5-3 minutes (torch.compile, cached in ~/.cache/vllm
after the first), so tests share a server per module. A missing install fails with the
command that makes it; nothing is skipped. Stdlib only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import ROOT
from tests.support.prometheus import free_port

SERVED_NAME = "smollm2"
DEFAULT_FLAGS = ("--dtype", "bfloat16", "--max-model-len", "1024", "--served-model-name", SERVED_NAME)
READY_TIMEOUT_S = 420.0  # a first start compiles; a loaded 2-core machine doubles it
STOP_TIMEOUT_S = 30.0


def venv_python() -> Path:
    venv = Path(os.environ.get("KVSCOPE_VLLM_VENV") or ROOT / ".venv-vllm")
    python = venv / "bin" / "python"
    assert python.is_file(), f"{python} is missing: install vLLM with scripts/setup_vllm.sh"
    return python


def model_dir() -> Path:
    cache = os.environ.get("KVSCOPE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvscope"
    )
    folder = Path(cache) / "models" / "smollm2-135m-instruct-hf"
    assert (folder / "config.json").is_file(), f"{folder} is missing: convert it with scripts/setup_vllm.sh"
    return folder


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_DO_NOT_TRACK="1",
    )
    env.pop("PYTHONPATH", None)  # kvscope's tree would shadow nothing, but keep vLLM's venv clean
    return env


def command(port: int, *flags: str) -> list[str]:
    """The server's argv: DEFAULT_FLAGS, then `flags` (argparse: later flags win)."""
    return [
        str(venv_python()),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *DEFAULT_FLAGS,
        *flags,
    ]


@dataclass(frozen=True, slots=True)
class VllmServer:
    url: str
    model: str
    pid: int
    log: Path

    def get_json(self, path: str, timeout_s: float = 10.0) -> object:
        with urllib.request.urlopen(self.url + path, timeout=timeout_s) as resp:
            return json.loads(resp.read())

    def metrics(self, timeout_s: float = 10.0) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=timeout_s) as resp:
            return resp.read().decode()


def wait_ready(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Wait for /health 200 and a model in /v1/models; fail with the log's tail if it exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"vLLM exited ({proc.returncode}): {log.read_text(errors='replace')[-3000:]}"
            )
        try:
            with urllib.request.urlopen(url + "/health", timeout=2.0) as resp:
                if resp.status == 200:
                    with urllib.request.urlopen(url + "/v1/models", timeout=5.0) as m:
                        if json.loads(m.read())["data"]:
                            return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"vLLM not ready in {timeout_s:.0f}s: {log.read_text(errors='replace')[-3000:]}")


def stop(proc: subprocess.Popen, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM to the server's own process group (it was started in a new session, so the group
    is vLLM's API server and its engine core, nothing else), SIGKILL after `timeout_s`."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10.0)
    except ProcessLookupError:
        pass
    # The engine core may outlive its parent for a moment; the group is ours alone.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def vllm_server(tmp: Path, *flags: str, env: dict[str, str] | None = None) -> Iterator[VllmServer]:
    """A vLLM server with DEFAULT_FLAGS, then `flags`; `env` adds to `environment()`."""
    port = free_port()
    log = tmp / f"vllm-{port}.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            command(port, *flags),
            stdout=f,
            stderr=subprocess.STDOUT,
            env={**environment(), **(env or {})},
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, proc, log)
        yield VllmServer(url, SERVED_NAME, proc.pid, log)
    finally:
        stop(proc)
