"""The bundled engine as a child of a command that reuses one engine for all its work
(`kvscope sweep`'s points, `kvscope probe`'s ladder): started on a free loopback port,
returned once /health answers, stopped by the caller."""

from __future__ import annotations

from pathlib import Path

from harness.run import procs
from harness.run.commands import LOOPBACK, child_env, engine_command


def start_bundled_engine(
    model: str | None, engine_args: list[str], log_dir: Path, api_key: str, timeout_s: float
) -> tuple[procs.Child, str]:
    """(child, base URL); RuntimeError with the log's tail when it does not become healthy."""
    port = procs.free_port()
    argv = engine_command(model, engine_args, port)
    child = procs.start("engine", argv, log_dir, env=child_env(api_key))
    url = f"http://{LOOPBACK}:{port}"
    ok, reason = procs.wait_http(url + "/health", timeout_s, child)
    if not ok:
        tail = child.log_tail()
        child.stop()
        raise RuntimeError(f"the engine did not become healthy ({reason}):\n{tail}")
    return child, url
