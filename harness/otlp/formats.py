"""Which engine's span this is, and its attributes in kvscope's terms.

The facts behind each map (names, units, which span carries them) are in
`docs/reference/request-spans.md`:
- vLLM: one `llm_request` span (kind SERVER) per request, `gen_ai.latency.*` in seconds,
  `gen_ai.usage.*` token counts. The reference engine emits the same span.
- SGLang: a root span `"<role> Req <rid[:8]>"` with `module=sglang::request` and the same
  `gen_ai.latency.*` names (no `time_in_queue`: queueing is the `prefill_waiting` stage span's
  duration), plus `gen_ai.usage.cached_tokens`.
- TGI: the handler span (`generate`, `generate_stream`, `completions`, `chat_completions`)
  with `total_time`, `queue_time`, `inference_time` as Rust `Duration` Debug strings
  (`"1.234567ms"`); no TTFT and no token counts.
Any other span (vLLM's start-up spans, SGLang's thread and other stage spans, TGI's inner
spans) is not a request span: `classify` returns None and the receiver counts it as "other".
Stdlib only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.otlp.span import ServerSpan

# kvscope field -> attribute name, per engine format
VLLM_ATTRIBUTES: dict[str, str] = {
    "queue_time_s": "gen_ai.latency.time_in_queue",
    "prefill_time_s": "gen_ai.latency.time_in_model_prefill",
    "decode_time_s": "gen_ai.latency.time_in_model_decode",
    "inference_time_s": "gen_ai.latency.time_in_model_inference",
    "ttft_s": "gen_ai.latency.time_to_first_token",
    "e2e_s": "gen_ai.latency.e2e",
    "prompt_tokens": "gen_ai.usage.prompt_tokens",
    "completion_tokens": "gen_ai.usage.completion_tokens",
    "request_id": "gen_ai.request.id",
}
SGLANG_ATTRIBUTES: dict[str, str] = {
    **{k: v for k, v in VLLM_ATTRIBUTES.items() if k != "queue_time_s"},
    "cached_prompt_tokens": "gen_ai.usage.cached_tokens",
}
TGI_ATTRIBUTES: dict[str, str] = {
    "queue_time_s": "queue_time",
    "inference_time_s": "inference_time",
    "e2e_s": "total_time",
}
TGI_HANDLERS = frozenset({"generate", "generate_stream", "completions", "chat_completions"})
SGLANG_ROOT = re.compile(r"^\w* ?Req [0-9A-Za-z_-]{1,8}$")
SGLANG_QUEUE_STAGE = "prefill_waiting"
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ns|µs|μs|us|ms|s)\s*$")
_UNIT_S = {"ns": 1e-9, "µs": 1e-6, "μs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_INT_FIELDS = frozenset({"prompt_tokens", "completion_tokens", "cached_prompt_tokens", "num_preemptions"})


@dataclass(frozen=True, slots=True)
class RawSpan:
    """A decoded OTLP span: ids as hex, times in ns, attributes as plain values."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    service: str
    scope: str


def rust_duration_s(value: Any) -> float:
    """Seconds from a Rust `Duration` Debug string ("1.5ms", "2.5s", "850µs"); NaN otherwise."""
    if not isinstance(value, str):
        return math.nan
    m = _DURATION.match(value)
    return float(m.group(1)) * _UNIT_S[m.group(2)] if m else math.nan


def _seconds(value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok and math.isfinite(value) and value >= 0 else math.nan


def _count(value: Any) -> int | None:
    if isinstance(value, str) and value.isdigit():  # OTLP/JSON sends 64-bit ints as strings
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _mapped(raw: RawSpan, fmt: str, role: str, names: dict[str, str], seconds: Callable) -> ServerSpan:
    span = ServerSpan(
        raw.trace_id,
        raw.span_id,
        raw.parent_span_id,
        raw.name,
        fmt,
        role,  # type: ignore[arg-type]
        raw.service,
        raw.scope,
        raw.start_ns / 1e9,
        raw.end_ns / 1e9,
    )
    used = []
    for field_name, key in names.items():
        if key not in raw.attributes:
            continue
        value = raw.attributes[key]
        if field_name == "request_id":
            parsed: Any = value if isinstance(value, str) else None
        elif field_name in _INT_FIELDS:
            parsed = _count(value)
        else:
            parsed = seconds(value)
        if parsed is not None and parsed == parsed:  # not None, not NaN
            setattr(span, field_name, parsed)
            used.append(key)
    span.attributes = ",".join(used)
    return span


def classify(raw: RawSpan) -> ServerSpan | None:
    """The span in kvscope's terms, or None when it is not a request (or queue-stage) span."""
    attrs = raw.attributes
    if raw.name == "llm_request" and any(k.startswith("gen_ai.latency.") for k in attrs):
        return _mapped(raw, "vllm", "request", VLLM_ATTRIBUTES, _seconds)
    if attrs.get("module") == "sglang::request" or (
        SGLANG_ROOT.match(raw.name) and "gen_ai.latency.e2e" in attrs
    ):
        return _mapped(raw, "sglang", "request", SGLANG_ATTRIBUTES, _seconds)
    if raw.name == SGLANG_QUEUE_STAGE:
        span = _mapped(raw, "sglang", "queue_stage", {}, _seconds)
        span.queue_time_s = max(0.0, (raw.end_ns - raw.start_ns) / 1e9)
        span.attributes = f"{SGLANG_QUEUE_STAGE} span duration"
        return span
    if raw.name in TGI_HANDLERS and ("total_time" in attrs or "queue_time" in attrs):
        return _mapped(raw, "tgi", "request", TGI_ATTRIBUTES, rust_duration_s)
    return None
