"""Spans made and exported by a real OpenTelemetry SDK pipeline in this process (TracerProvider,
BatchSpanProcessor, the OTLP/HTTP exporter), received by the real receiver process, joined
to requests by trace id through the bundle's writer and reader.

Encodings: protobuf through `opentelemetry-exporter-otlp-proto-http`'s exporter (plain and
gzip). The SDK has no OTLP/JSON exporter, so the JSON case is an exporter built here from
the SDK's own encoder (`encode_spans`) and the official proto's `json_format`, with hex ids
as the OTLP/JSON rules require: the bytes on the wire are what an OTLP/JSON exporter or a
Collector's `otlphttp` exporter with `encoding: json` sends.
"""

from __future__ import annotations

import json
import os
import urllib.request

import pandas as pd
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from harness.bundle.read import normalise_requests
from harness.bundle.spans import RAW_DIR, fill_from_spans, write_spans
from harness.workload.record import RequestRecord
from tests.harness.otlp.receiver import receiver
from tests.support.otlp_bodies import otlp_json

pytestmark = pytest.mark.timeout(120)
N = 40


class OtlpJsonExporter(SpanExporter):
    """OTLP/JSON over HTTP from the SDK's encoder (see the module docstring)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def export(self, spans) -> SpanExportResult:
        doc = otlp_json(encode_spans(spans))
        req = urllib.request.Request(
            self.endpoint, json.dumps(doc).encode(), {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return SpanExportResult.SUCCESS if resp.status == 200 else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass


def exporter(kind: str, endpoint: str) -> SpanExporter:
    if kind == "json":
        return OtlpJsonExporter(endpoint)
    return OTLPSpanExporter(endpoint=endpoint, compression=Compression.Gzip if kind == "gzip" else None)


@pytest.mark.parametrize("kind", ["protobuf", "gzip", "json"])
def test_sdk_exported_spans_join_to_their_requests(tmp_path, kind):
    records = []
    with receiver(tmp_path / RAW_DIR) as r:
        provider = TracerProvider(resource=Resource.create({"service.name": "sdk-test"}))
        provider.add_span_processor(BatchSpanProcessor(exporter(kind, r.endpoint), max_export_batch_size=16))
        tracer = provider.get_tracer("vllm.tracing.otel")
        propagator = TraceContextTextMapPropagator()
        for i in range(N):
            rec = RequestRecord(f"r{i}", "w", "chat", "chat", send_time_unix=100.0 + i, ok=True)
            rec.trace_id = os.urandom(16).hex()
            records.append(rec.to_dict())
            carrier = {"traceparent": f"00-{rec.trace_id}-{os.urandom(8).hex()}-01"}
            span = tracer.start_span(
                "llm_request",
                context=propagator.extract(carrier),
                kind=SpanKind.SERVER,
                attributes={
                    "gen_ai.latency.time_in_queue": i / 1000,
                    "gen_ai.latency.time_to_first_token": 0.1 + i / 1000,
                    "gen_ai.latency.e2e": 1.0 + i / 1000,
                    "gen_ai.usage.completion_tokens": i,
                },
            )
            span.end()
        # Not the request spans: the start-up span vLLM also exports to the same endpoint.
        tracer.start_span("EngineCoreProc init").end()
        provider.shutdown()  # flushes the batch processor
        status = r.status()
    assert status["request_spans"] == N and status["spans_other"] == 1 and status["bodies_malformed"] == 0
    requests = normalise_requests(pd.DataFrame(records))
    stats = write_spans(tmp_path, requests)
    assert (
        stats["join"]["joined"] == N and stats["join"]["missing"] == 0 and stats["join"]["unknown_trace"] == 0
    )
    joined = fill_from_spans(requests, pd.read_parquet(tmp_path / "spans.parquet")).set_index("request_id")
    for i in range(N):
        row = joined.loc[f"r{i}"]
        assert row["server_timing_source"] == "otlp:vllm"
        assert row["server_queue_time_s"] == pytest.approx(i / 1000, abs=1e-12)
        assert row["server_e2e_s"] == pytest.approx(1.0 + i / 1000, abs=1e-12)
