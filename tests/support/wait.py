"""Waiting on an observable condition: the one way the tests synchronise (never a fixed sleep,
which is too short on a loaded machine and too long on an idle one).

Stdlib only (the exporter's slim tests use it). An async test whose condition is reached on
its own event loop waits in a thread, so the loop runs meanwhile:
`await asyncio.to_thread(wait_until, check, "what")`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T],
    what: str,
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
    ok: Callable[[T], object] = bool,
) -> T:
    """Call `probe` every `interval_s` until `ok(value)` holds (by default: the value is truthy)
    and return that value. After `timeout_s`, fail with an AssertionError naming `what` was
    waited for and the last value seen. `probe` may act as well as look (send a probe message,
    then say whether one arrived)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if ok(value):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout_s:g} s waiting for {what}; last value seen: {value!r}"
            )
        time.sleep(interval_s)
