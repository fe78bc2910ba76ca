"""The small grammars every kvscope command accepts: durations, sizes and HOST:PORT.

Each comes twice: a parse function that raises ValueError (for code and config files) and an
argparse `type=` adapter that turns the ValueError into argparse's own error (for flags).

- Durations: a number with an optional unit, `500ms`, `30s`, `2m`, `1h`, `1e-3s`; a bare
  number is seconds. `require_unit=True` refuses bare numbers where "100" is as likely to
  mean milliseconds as seconds (SLO thresholds).
- Sizes: bytes with an optional binary unit, `512k`, `10MiB`, `1G`, `4096`; k, m and g (with
  or without b or ib) are powers of 1024.
- HOST:PORT: `127.0.0.1:9400`, `gpu-box:8000`, `[::1]:80`, `:9400` (the default host); an
  IPv6 address needs its brackets.
- Counts: a positive integer, digits with optional `_` or `,` separators (`50_000`).

Stdlib only, like the rest of the exporter's command line.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DURATION_UNITS: dict[str, float] = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|h)?\s*")
_SIZE = re.compile(r"\s*([0-9]+)\s*(?:([kmg])(?:i?b)?|b)?\s*", re.IGNORECASE)
_SIZE_SHIFT = {"k": 10, "m": 20, "g": 30}


def parse_duration(text: str, *, require_unit: bool = False) -> float:
    """'500ms' -> 0.5, '2m' -> 120.0, '1.5' -> 1.5 (seconds). Never negative."""
    m = _DURATION.fullmatch(text)
    if not m or (require_unit and m.group(2) is None):
        unit_hint = "give a unit: " if require_unit else ""
        raise ValueError(f"not a duration: {text!r} ({unit_hint}e.g. 500ms, 30s, 2m, 1h)")
    return float(m.group(1)) * DURATION_UNITS[m.group(2) or "s"]


def parse_size(text: str) -> int:
    """'10MiB' -> 10485760, '512k' -> 524288, '100' -> 100 (bytes)."""
    m = _SIZE.fullmatch(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 512KiB, 10MiB, 1G or bytes)")
    return int(m.group(1)) << _SIZE_SHIFT.get((m.group(2) or "").lower(), 0)


def parse_host_port(text: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """'gpu-box:8000' -> ('gpu-box', 8000); '[::1]:80' -> ('::1', 80); ':9400' -> default host."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"want HOST:PORT with a port in 0-65535, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"write an IPv6 address in brackets, e.g. [::1]:{port}, got {text!r}")
    return host or default_host, int(port)


def parse_count(text: str) -> int:
    """'50_000' -> 50000, '1,000' -> 1000; at least 1."""
    digits = text.strip().replace("_", "").replace(",", "")
    if not digits.isdigit() or int(digits) < 1:
        raise ValueError(f"want a positive whole number, got {text!r}")
    return int(digits)


def _argparse_type(parse: Callable[[str], T], name: str) -> Callable[[str], T]:
    def adapter(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    adapter.__name__ = name  # argparse names the type in "invalid <name> value" messages
    return adapter


def _positive_duration(text: str) -> float:
    seconds = parse_duration(text)
    if seconds <= 0:
        raise ValueError(f"a duration must be positive, got {text!r}")
    return seconds


# argparse `type=` adapters. `duration` takes positive durations only: every flag that wants
# one is an interval, a timeout or a run length.
duration = _argparse_type(_positive_duration, "duration")
size = _argparse_type(parse_size, "size")
host_port = _argparse_type(parse_host_port, "host_port")
count = _argparse_type(parse_count, "count")
