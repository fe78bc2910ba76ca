"""One server span as kvscope keeps it: `ServerSpan`, the row schema of `spans.parquet`.

Invariants:
- `trace_id` is 32 lowercase hex digits, `span_id` 16; `parent_span_id` is "" for a root.
- Durations are seconds (NaN where the engine's span does not say); token counts are None
  where it does not say. Nothing is derived from another engine's convention: a TGI span
  has no TTFT, so `ttft_s` stays NaN.
- `role` is "request" for the span that describes one request (the join uses these) or
  "queue_stage" for a stage span whose duration is the request's queue time (SGLang's
  `prefill_waiting`), merged into its trace's request span by the join.
- `attributes` names the attribute keys the values were read from, comma-separated, so a
  report can say where each figure came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal

Role = Literal["request", "queue_stage"]
NAN = math.nan


@dataclass(slots=True)
class ServerSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    engine_format: str  # "vllm", "sglang" or "tgi": whose attribute names were read
    role: Role
    service: str  # resource service.name
    scope: str  # instrumentation scope name
    start_unix: float
    end_unix: float
    received_unix: float = NAN
    queue_time_s: float = NAN
    prefill_time_s: float = NAN
    decode_time_s: float = NAN
    inference_time_s: float = NAN  # prefill + decode as one figure (TGI has only this)
    ttft_s: float = NAN
    e2e_s: float = NAN
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    num_preemptions: int | None = None
    request_id: str | None = None  # the engine's request id (gen_ai.request.id)
    attributes: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in SPAN_COLUMNS}


SPAN_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(ServerSpan))
