"""The server a run starts itself: `kvscope run --serve "CMD"`, or the bundled engine.

kvscope starts the command in a session of its own (so stopping it reaches every process the
server spawned: vLLM's engine core is a child process), waits until its /health answers 200,
runs the load test against it as against a --target, and stops it by its process group at the
end, whatever happened. run.json records the command, the engine it recognises and where it
listened (`serve`), which is what `kvscope advise --verify` restarts with a verdict's change.
The bundled engine (no --target, no --serve) is the same case with kvscope's own command.

The command is split like a shell would (shlex), without a shell: leading NAME=VALUE words
are environment variables for the server (values of names that look secret are not written
to run.json). Where it listens: its --port (and --host; 0.0.0.0 is reached on loopback), else
the --target URL given with it, else the engine's documented default (vLLM 8000, llama-server
8080, the bundled engine 8000). A port already taken, a command that exits, or a server not
healthy within --startup-timeout fails the run with exit 4 and leaves no process behind.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Literal
from urllib.parse import urlsplit

Engine = Literal["vllm", "llamacpp", "bundled", "other"]
DEFAULT_PORTS: dict[str, int] = {"vllm": 8000, "llamacpp": 8080, "bundled": 8000}
ENGINE_NAMES = {"vllm": "vLLM", "llamacpp": "llama.cpp (llama-server)", "bundled": "the bundled engine"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)
REDACTED = "<redacted>"


@dataclass(frozen=True, slots=True)
class ServeCommand:
    argv: tuple[str, ...]
    engine: Engine
    host: str  # where kvscope connects
    port: int
    port_source: str  # "--port", "--target" or "default"
    env: dict[str, str] = field(default_factory=dict)  # the command's NAME=VALUE words

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def text(self) -> str:
        """The command as a user would type it (secrets redacted)."""
        words = [f"{k}={REDACTED if _SECRET.search(k) else v}" for k, v in self.env.items()]
        return shlex.join([*words, *self.argv])

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.text(),
            "argv": list(self.argv),
            "env": {k: REDACTED if _SECRET.search(k) else v for k, v in self.env.items()},
            "engine": self.engine,
            "host": self.host,
            "port": self.port,
            "port_source": self.port_source,
        }

    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.env}


def recognise(argv: tuple[str, ...] | list[str]) -> Engine:
    """Which engine a command starts, from its program and module names."""
    names = [PurePath(a).name for a in argv[:4]]
    if "vllm.entrypoints.openai.api_server" in argv or (names and names[0] == "vllm"):
        return "vllm"
    if any(n.startswith("llama-server") for n in names[:1]):
        return "llamacpp"
    joined = " ".join(argv[:6])
    if "engine serve" in joined and ("harness.cli" in joined or (names and names[0] == "kvscope")):
        return "bundled"
    return "other"


def flag_value(argv: tuple[str, ...] | list[str], flag: str) -> str | None:
    """The last value of `flag` (`--flag V` or `--flag=V`), as argparse would read it."""
    value = None
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value


def parse_serve(text: str, target: str | None = None) -> ServeCommand:
    """The command and where it will listen; ValueError says what is wrong."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"--serve: cannot split the command: {exc}") from None
    env: dict[str, str] = {}
    while words and _ASSIGNMENT.match(words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if not words:
        raise ValueError("--serve needs a command, e.g. --serve 'vllm serve MODEL --port 8000'")
    argv = tuple(words)
    engine = recognise(argv)
    port_text, host = flag_value(argv, "--port"), flag_value(argv, "--host") or "127.0.0.1"
    if port_text is not None:
        source = "--port"
    elif target:
        port_text, source = str(urlsplit(target).port or ""), "--target"
    elif engine in DEFAULT_PORTS:
        port_text, source = str(DEFAULT_PORTS[engine]), "default"
    else:
        raise ValueError(
            "--serve: cannot tell the server's port: give it --port in the command, or --target URL"
        )
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"--serve: the port {port_text!r} is not a number") from None
    if not 0 < port < 65536:
        raise ValueError(f"--serve: port {port} is out of range")
    connect = "127.0.0.1" if host in ("0.0.0.0", "", "::", "localhost") else host
    if target and urlsplit(target).port not in (None, port):
        raise ValueError(f"--serve listens on port {port} but --target says {target}")
    return ServeCommand(argv, engine, connect, port, source, env)


def port_taken(host: str, port: int) -> bool:
    """Does something already listen there? (A connect succeeds.)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex((host, port)) == 0
