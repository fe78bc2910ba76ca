"""`--otlp-traces-endpoint`: one OpenTelemetry span per finished request, as vLLM makes it.

Same span as vLLM 0.33's `OutputProcessor.do_tracing` (docs/reference/request-spans.md):
name `llm_request`, kind SERVER, start = the request's arrival (wall clock), ended when the
response is complete, parent = the incoming W3C `traceparent` (a new root without one),
attributes `gen_ai.latency.*` in seconds and `gen_ai.usage.*` token counts, request
parameters only when truthy. The values are the `RequestTiming` the SSE `kvscope` object
carries, so the two agree exactly.

Transport as vLLM chooses it: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` unset or `grpc` -> OTLP/gRPC
(needs `opentelemetry-exporter-otlp-proto-grpc`, not a kvscope dependency: a clear error says
so), `http/protobuf` -> OTLP/HTTP with the endpoint as the full URL; anything else is an
error at start, as in vLLM. Spans leave through the SDK's BatchSpanProcessor (its
`OTEL_BSP_*` settings apply, 5 s delay by default), on the SDK's own thread; `shutdown`
flushes what is queued. OpenTelemetry is imported only here, only when the flag is given.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from reference_engine.sampling_params import SamplingParams
from reference_engine.server.events import Outcome

PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
SPAN_NAME = "llm_request"
SCOPE = "vllm.tracing.otel"  # vLLM's instrumentation scope name, so a span reads as vLLM's does
MODULE_NAME = "kvscope.reference_engine"


def _exporter(endpoint: str) -> Any:
    protocol = os.environ.get(PROTOCOL_ENV, "grpc").strip()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ValueError(
                f"--otlp-traces-endpoint: {PROTOCOL_ENV} is unset or grpc (OTLP/gRPC, as in vLLM), but "
                "opentelemetry-exporter-otlp-proto-grpc is not installed; install it, or set "
                f"{PROTOCOL_ENV}=http/protobuf and give the full URL (http://HOST:PORT/v1/traces)"
            ) from None
        return OTLPSpanExporter(endpoint=endpoint, insecure=True)
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint)
    raise ValueError(f"{PROTOCOL_ENV}={protocol!r} is not supported (grpc or http/protobuf, as in vLLM)")


class RequestTracer:
    """Owns a TracerProvider of its own (not the process-global one), so several servers in
    one process (tests) do not share spans."""

    def __init__(self, endpoint: str) -> None:
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace import SpanKind
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
        except ImportError:
            raise ValueError(
                "--otlp-traces-endpoint needs opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http "
                "(pip install 'kvscope[engine]')"
            ) from None
        exporter = _exporter(endpoint)
        resource = Resource.create(
            {"vllm.instrumenting_module_name": MODULE_NAME, "vllm.process_id": str(os.getpid())}
        )
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer(SCOPE)
        self._propagator = TraceContextTextMapPropagator()
        self._kind = SpanKind.SERVER

    def emit(
        self, headers: Mapping[str, str], request_id: str, params: SamplingParams, outcome: Outcome
    ) -> None:
        """One span for a request that finished (`outcome`); `headers` are the request's
        (only `traceparent` / `tracestate` are read)."""
        carrier = {k: headers[k] for k in ("traceparent", "tracestate") if k in headers}
        timing = outcome.timing
        attributes: dict[str, Any] = {
            "gen_ai.usage.prompt_tokens": outcome.prompt_tokens,
            "gen_ai.usage.completion_tokens": outcome.completion_tokens,
            "gen_ai.request.id": request_id,
        }
        latency = {
            "gen_ai.latency.time_to_first_token": timing.ttft_s,
            "gen_ai.latency.e2e": timing.e2e_s,
            "gen_ai.latency.time_in_queue": timing.queue_time_s,
            "gen_ai.latency.time_in_model_prefill": timing.prefill_time_s,
            "gen_ai.latency.time_in_model_decode": timing.decode_time_s,
        }
        if timing.prefill_time_s is not None and timing.decode_time_s is not None:
            latency["gen_ai.latency.time_in_model_inference"] = timing.prefill_time_s + timing.decode_time_s
        attributes.update({k: float(v) for k, v in latency.items() if v is not None})
        # vLLM sets the request parameters only when truthy (temperature 0 is left out).
        for key, value in (
            ("gen_ai.request.top_p", params.top_p),
            ("gen_ai.request.max_tokens", params.max_tokens),
            ("gen_ai.request.temperature", params.temperature),
            ("gen_ai.request.n", params.n),
        ):
            if value:
                attributes[key] = value
        span = self._tracer.start_span(
            SPAN_NAME,
            context=self._propagator.extract(carrier),
            kind=self._kind,
            attributes=attributes,
            start_time=int(timing.arrival_unix * 1e9),
        )
        span.end()

    def shutdown(self) -> None:
        """Export what is queued, then stop the SDK's thread."""
        self._provider.shutdown()
