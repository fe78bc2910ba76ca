"""A real server a test started (llama.cpp's, vLLM's): where it listens, the model id it
serves, its pid and log, and the two reads tests make of it. Stdlib only."""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class RunningServer:
    url: str
    model: str  # the id /v1/models states
    pid: int
    log: Path

    def get_json(self, path: str, timeout_s: float = 10.0) -> object:
        with urllib.request.urlopen(self.url + path, timeout=timeout_s) as resp:
            return json.loads(resp.read())

    def metrics(self, timeout_s: float = 10.0) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=timeout_s) as resp:
            return resp.read().decode()
