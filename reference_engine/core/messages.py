"""The engine-core protocol: every message between the API server and the engine core.

Both transports carry these same objects: the process transport msgpack-encodes them
(msgspec) over ZeroMQ, the thread transport hands them over as they are. The wire format and
its extension rules are documented in `reference_engine/server/README.md` ("Engine core").

Server -> core (`Command`, a tagged union; one message per ZeroMQ frame):
  `AddRequest`     a validated request (token ids, sampling parameters, arrival time);
  `AbortRequests`  stop requests and free their blocks; each unfinished choice comes back
                   as a final `SeqOutput` with finish_reason "abort" and its timing;
  `StopSequences`  choices the server found a stop string in: finish them silently;
  `Shutdown`       abort what is left, report it, exit.
Core -> server: `CoreReady` or `CoreStartFailed` once, then one `CoreOutputs` per engine
iteration that changed anything (a step, or commands applied while idle).

Rules that keep the shape stable as features are added:
- Every field added later is appended with a default, so a message without it still
  decodes (`array_like` structs decode missing trailing fields to their defaults).
- Per-request facts ride on `SeqOutput.timing` (core timestamps, preemptions, cache hits):
  enough for the server to compute the vLLM histograms, the `kvscope` timing object and,
  later, an OTLP span per request, without asking the core again.
- Per-step facts ride on `CoreStats`: cumulative counters plus the gauges after the step.
- KV events are not part of this protocol: as in vLLM, the core publishes them itself on a
  socket of its own, so they never pass through the API server.

Timestamps are `time.monotonic()` seconds. On Linux that clock (CLOCK_MONOTONIC) is one
system-wide clock, so the server's arrival stamp and the core's stamps are comparable.
"""

from __future__ import annotations

from typing import Any

import msgspec

from reference_engine.engine import TokenLogprob
from reference_engine.sampling_params import SamplingParams

# -- server -> core -------------------------------------------------------------------------


class AddRequest(msgspec.Struct, tag="add", array_like=True, omit_defaults=True):
    """A request the server has already validated with `check_admission`. `arrival_time`
    is the server's monotonic stamp at the HTTP handler; `trace_headers` (W3C traceparent
    and tracestate) travel with the request so the core's work can join the caller's trace."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float
    trace_headers: dict[str, str] | None = None


class AbortRequests(msgspec.Struct, tag="abort", array_like=True):
    request_ids: list[str]


class StopSequences(msgspec.Struct, tag="stop", array_like=True):
    """(request id, choice index) pairs the server finished on a stop string."""

    choices: list[tuple[str, int]]


class Shutdown(msgspec.Struct, tag="shutdown", array_like=True):
    pass


Command = AddRequest | AbortRequests | StopSequences | Shutdown


# -- core -> server -------------------------------------------------------------------------


class SeqTiming(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """Core-side facts of one choice, sent with its first output, its final output, and
    whenever its preemption count changed. Stamps a choice has not reached are None."""

    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    num_preemptions: int = 0
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache


class SeqOutput(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """News about one choice (`index`) of request `request_id` after one iteration."""

    request_id: str
    index: int
    new_token_ids: list[int] = []
    new_logprobs: list[TokenLogprob] | None = None
    # Logprobs of prompt positions 1.. (position 0 has none); on the request's first output.
    prompt_logprobs: dict[int, TokenLogprob] | None = None
    finish_reason: str | None = None  # "stop" (EOS), "length" or "abort"
    timing: SeqTiming | None = None


class Rejection(msgspec.Struct, array_like=True, omit_defaults=True):
    """The core refused a request the server had admitted (`internal`: not the client's
    fault, e.g. the engine already failed)."""

    request_id: str
    message: str
    param: str | None = None
    internal: bool = False


class CoreStats(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """The core's statistics after an iteration. Counters are cumulative since the core
    started, so a reader that sees every record (or only the latest) can advance its own
    counters by the difference and stay equal to what the engine did. `step_tokens` holds the
    batch size in tokens of each step since the previous record."""

    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0
    num_free_blocks: int = 0
    steps: int = 0
    scheduled_tokens: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    num_preemptions: int = 0
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    preempted_prefix_cache_queries: int = 0
    preempted_prefix_cache_hits: int = 0
    aborted: int = 0
    step_tokens: list[int] = []
    # (kind, seconds) residency samples since the previous record (--kv-cache-metrics)
    residency: list[tuple[str, float]] = []


class CoreOutputs(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """One iteration of the core. `timestamp` is taken right after the step (the moment its
    tokens exist); `failure` says the engine failed and will serve nothing more."""

    timestamp: float
    outputs: list[SeqOutput] = []
    stats: CoreStats | None = None
    rejected: list[Rejection] | None = None
    failure: str | None = None


class CoreReady(msgspec.Struct, tag="ready", array_like=True, omit_defaults=True):
    """Sent once the engine is built: what the server needs to validate, size its metric
    buckets and describe the pool (`vllm:cache_config_info`)."""

    model_name: str
    model_source: str
    max_model_len: int
    vocab_size: int
    num_blocks: int
    block_size: int
    kv_cache_dtype: str
    enable_prefix_caching: bool
    allocator: str
    weights: str = ""  # how the weights are held, e.g. "float32" or "int8 (per-channel), bfloat16"
    pid: int = 0
    kv_cache_metrics: bool = False  # the core samples block residency (vLLM's three histograms)
    # the KV event publisher's config as vLLM states it (GET /kv_event_sources); None: no events
    kv_events_config: dict[str, Any] | None = None


class CoreStartFailed(msgspec.Struct, tag="start_failed", array_like=True):
    """The engine could not be built (bad configuration, missing model): `message` is for
    the user, and the core exits with status 2 after sending it."""

    message: str


Handshake = CoreReady | CoreStartFailed
