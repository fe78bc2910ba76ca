"""Where kvscope keeps what it builds once per machine (llama.cpp's server for the benchmarks,
the native decode stack): `$KVSCOPE_CACHE`, else `$XDG_CACHE_HOME/kvscope` or
`~/.cache/kvscope`, as `scripts/build_llama_server.sh` chooses it. Stdlib only."""

from __future__ import annotations

import os
from pathlib import Path


def kvscope_cache() -> Path:
    return Path(
        os.environ.get("KVSCOPE_CACHE")
        or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "kvscope")
    )
