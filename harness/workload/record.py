"""One streamed request as the client saw it: the row schema of `requests.parquet`.

Other parts of kvscope (analysis, reports, the advisor) read these column names; add
columns freely, never rename or drop one. Invariants a record keeps:
- `ok` is True exactly when `error_class` is None.
- Times are seconds. `send_time_unix` is wall clock (to line requests up with scraped server
  samples); `ttft_s`, `e2e_s` and `itl_s` come from a monotonic clock started at the send.
- `ttft_s` and `itl_s` count chunks that carry output (see `sse._is_token`: a
  content string, even "", or reasoning text), as vLLM's benchmark does; `num_chunks`
  counts them too.
- `output_tokens` is the server's `usage.completion_tokens` when `usage_source == "server"`;
  otherwise it is the number of output chunks ("client_count"), which undercounts when a
  server packs several tokens into one chunk.
- `scheduled_time_unix` / `schedule_lag_s` are NaN in closed-loop workloads (no schedule).
- `server_*` come from the server's own per-request timings: the reference engine's
  `kvscope` object, or llama.cpp's `timings` (`harness.workload.llamacpp_timings`: no queue
  time, so `server_queue_time_s` is NaN and `server_ttft_s` starts when a slot took the
  request).
- `trace_id` is the W3C trace id (32 hex digits) of the `traceparent` header the request
  was sent with (None with --no-traceparent); a server's OTLP span carries it back
  (`harness.otlp`).
- `server_timing_source` names where the `server_*` values came from: "kvscope" (the
  reference engine's SSE object), "llamacpp" (its `timings`), or, filled in when the bundle
  is read, "otlp:<format>" for a joined span (`harness.bundle.spans`); None without any.
- `user_id` names the Locust user that sent the request; in a closed loop a user's requests
  go out one after the other, so the advisor replays them as a chain (None in older bundles).
- `cached_tokens` is the prompt tokens the server reported cached, from whichever report it
  gave: `usage.prompt_tokens_details.cached_tokens` (vLLM with
  --enable-prompt-tokens-details, llama.cpp, the reference engine), else the per-request
  timings (the reference engine's `kvscope` object, llama.cpp's `cache_n`), which also stay
  in `server_cached_prompt_tokens`; None when the server reported neither.
- Session workloads (`multi_turn`, `agentic`, a replayed trace with session ids) fill
  `session_id` and `turn` (0-based, the order of the session's requests);
  `history_hash` is the digest of the messages the turn continues (every message it sent
  before its new one) and `conversation_hash` the digest of the messages it sent plus the
  answer it got (`harness.workload.sessions.digest`), so a turn carried its session's whole
  history exactly when its `history_hash` is the previous turn's `conversation_hash`.
  `session_end` is set on a session's last request: why the session ended there
  (`harness.workload.sessions.SessionEnd`). All None for single requests.
- `retries` is 1 when the request's pooled keep-alive connection turned out closed before
  any response byte and it was sent once more on a fresh connection; timings then include
  the failed attempt (a few ms), as a user of that client would see.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass, field, fields
from typing import Any, Literal

# Error classes, most specific first. A request that never got an HTTP response is
# connect_error or timeout; one that got a non-200 is http_4xx / http_5xx; one whose stream
# broke, carried an error event or ended before finishing is stream_error; a 200 stream
# that finished without a single generated chunk is no_tokens; one still streaming when the
# run's drain time ran out is aborted (the server counts it as an abort too). client_error
# means the client itself raised (a kvscope bug, never the server's fault).
ErrorClass = Literal[
    "connect_error", "timeout", "http_4xx", "http_5xx", "stream_error", "no_tokens", "aborted", "client_error"
]
Endpoint = Literal["chat", "completions"]
# calibration: the probes that measure tokens per word; warmup: sent during --warmup. Only
# "measure" requests enter a statistic (`bundle.read.measured`).
Phase = Literal["measure", "calibration", "warmup"]
UsageSource = Literal["server", "client_count", "none"]  # "none": failed before any chunk

NAN = math.nan


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    worker_id: str
    workload: str
    endpoint: Endpoint
    send_time_unix: float
    scheduled_time_unix: float = NAN
    schedule_lag_s: float = NAN
    ttft_s: float = NAN
    e2e_s: float = NAN
    itl_s: list[float] = field(default_factory=list)
    num_chunks: int = 0
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    usage_source: UsageSource = "none"
    cached_tokens: int | None = None
    target_prompt_tokens: int | None = None
    target_output_tokens: int | None = None
    finish_reason: str | None = None
    status_code: int = 0
    error_class: ErrorClass | None = None
    ok: bool = False
    server_queue_time_s: float = NAN
    server_prefill_time_s: float = NAN
    server_ttft_s: float = NAN
    server_decode_time_s: float = NAN
    server_e2e_s: float = NAN
    server_num_preemptions: int | None = None
    server_cached_prompt_tokens: int | None = None
    # Extra columns (not part of the fixed contract above, but stable):
    server_arrival_unix: float = NAN  # server's wall clock when the request reached its handler
    error_message: str | None = None
    phase: Phase = "measure"
    n: int = 1  # choices requested (parallel sampling)
    prefix_id: int | None = None  # which shared prefix (shared_prefix / replay hash groups)
    # Prompt fingerprint (harness.workload.fingerprint): content-defined chunk hashes, so the
    # advisor can find prefixes that are shared but not byte-identical without storing prompts.
    prompt_chunk_hashes: list[int] = field(default_factory=list)
    prompt_chunk_chars: list[int] = field(default_factory=list)
    prompt_chars: int | None = None
    trace_id: str | None = None
    server_timing_source: str | None = None
    retries: int = 0  # stale keep-alive connection: sent again on a fresh one (see the module doc)
    # The Locust user that sent it ("<worker_id>.u<n>"): a closed-loop user's requests form a
    # chain, each sent when the previous one ended, which the advisor's replays keep.
    user_id: str | None = None
    session_id: str | None = None
    turn: int | None = None
    history_hash: str | None = None
    conversation_hash: str | None = None
    session_end: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Field -> value, shallow (the lists are the record's own): a record is not changed
        once it is reported, and a deep copy of its gaps cost the load generator ~0.3 ms
        per request."""
        return {name: getattr(self, name) for name in COLUMNS}

    def set_error(self, error_class: ErrorClass, message: str | None = None) -> None:
        """Record the first error only: a stream error after an HTTP error adds nothing."""
        if self.error_class is None:
            self.error_class = error_class
            self.error_message = (message or "")[:300] or None
        self.ok = False

    def apply_server_timing(self, timing: dict[str, Any]) -> None:
        """Copy the server's per-request timings: the reference engine's `kvscope` object, or
        llama.cpp's `timings` converted (`llamacpp_timings`); absent elsewhere."""
        for key in ("queue_time_s", "prefill_time_s", "ttft_s", "decode_time_s", "e2e_s"):
            value = timing.get(key)
            if isinstance(value, (int, float)):
                setattr(self, "server_" + key, float(value))
        source = timing.get("source")
        self.server_timing_source = source if isinstance(source, str) else "kvscope"
        if isinstance(timing.get("arrival_unix"), (int, float)):
            self.server_arrival_unix = float(timing["arrival_unix"])
        for key in ("num_preemptions", "cached_prompt_tokens"):
            value = timing.get(key)
            if isinstance(value, int):
                setattr(self, "server_" + key, value)


COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RequestRecord))


def classify_exception(exc: BaseException, during_stream: bool) -> ErrorClass:
    """Map a client-side exception to an error class.

    Timeouts are their own class wherever they happen (a slow server is not a broken one),
    also wrapped in the HTTP client's RetriesExceeded (geventhttpclient keeps the cause in
    `original`); anything else before a response is a connection problem, anything after is
    the stream's.
    """
    original = getattr(exc, "original", None)
    if isinstance(original, BaseException):
        exc = original
    if isinstance(exc, (TimeoutError, socket.timeout)) or type(exc).__name__ == "Timeout":
        return "timeout"
    if during_stream:
        return "stream_error"
    if isinstance(exc, (OSError, ConnectionError)) or "Connection" in type(exc).__name__:
        return "connect_error"
    return "client_error"


def http_error_class(status: int) -> ErrorClass | None:
    if 400 <= status < 500:
        return "http_4xx"
    if status >= 500:
        return "http_5xx"
    return None
