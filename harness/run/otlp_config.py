"""`kvscope run --otlp`: the span receiver's settings, checked before anything starts.

The grace period's default is above vLLM's 5 s span batch delay (the SDK's
BatchSpanProcessor default, `OTEL_BSP_SCHEDULE_DELAY`), so the last batch of a run is not
lost; it ends early once every successful request has its span.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from exporter.units import parse_duration
from harness.otlp.sink import DEFAULT_MAX_SPANS

DEFAULT_GRACE_S = 8.0
DEFAULT_LISTEN = ("127.0.0.1", 0)


@dataclass(frozen=True, slots=True)
class OtlpConfig:
    listen: tuple[str, int] = DEFAULT_LISTEN
    grace_s: float = DEFAULT_GRACE_S
    max_spans: int = DEFAULT_MAX_SPANS


def otlp_config(args: argparse.Namespace) -> OtlpConfig | None:
    """None unless --otlp or --otlp-listen was given; ValueError naming the flag."""
    listen = getattr(args, "otlp_listen", None)
    if not getattr(args, "otlp", False) and listen is None:
        if getattr(args, "otlp_grace", None) is not None:
            raise ValueError("--otlp-grace needs --otlp (or --otlp-listen)")
        return None
    grace_text = getattr(args, "otlp_grace", None)
    grace = DEFAULT_GRACE_S
    if grace_text is not None:
        try:
            grace = parse_duration(grace_text)
        except ValueError as exc:
            raise ValueError(f"--otlp-grace: {exc}") from None
        if grace < 0:
            raise ValueError(f"--otlp-grace must not be negative, got {grace_text!r}")
    return OtlpConfig(listen or DEFAULT_LISTEN, grace)
