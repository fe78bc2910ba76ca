"""Span shapes to kvscope's terms. vLLM's shape is the real export in tests/fixtures/spans;
SGLang's and TGI's are built here from the attribute names and formats their sources show
(docs/reference/request-spans.md): no export of either could be captured on this machine."""

from __future__ import annotations

import math

import pytest

from harness.otlp.decode import JSON, PROTOBUF, MalformedBody, parse, raw_spans
from harness.otlp.formats import RawSpan, classify, rust_duration_s
from tests.harness.otlp.receiver import FIXTURES

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def raw(name: str, attributes: dict, start_ns: int = 1_000_000_000, end_ns: int = 3_000_000_000) -> RawSpan:
    return RawSpan(TRACE, "00f067aa0ba902b7", "", name, start_ns, end_ns, attributes, "svc", "scope")


@pytest.mark.parametrize("name,media", [("llm_request.pb", PROTOBUF), ("llm_request.otlp.json", JSON)])
def test_vllm_fixture_in_both_encodings_maps_every_attribute(name, media):
    (span,) = [classify(r) for r in raw_spans(parse((FIXTURES / name).read_bytes(), media))]
    assert span.engine_format == "vllm" and span.role == "request" and span.trace_id == TRACE
    assert span.scope == "vllm.tracing.otel" and span.service == "unknown_service:python"
    assert span.queue_time_s == pytest.approx(0.05) and span.prefill_time_s == pytest.approx(0.15)
    assert span.inference_time_s == pytest.approx(1.35) and span.end_unix > span.start_unix
    assert "gen_ai.latency.time_in_queue" in span.attributes.split(",")


def test_sglang_root_and_queue_stage():
    root = classify(
        raw(
            " Req 1a2b3c4d",
            {
                "module": "sglang::request",
                "gen_ai.latency.time_to_first_token": 0.2,
                "gen_ai.latency.e2e": 1.0,
                "gen_ai.latency.time_in_model_prefill": 0.15,
                "gen_ai.latency.time_in_model_decode": 0.8,
                "gen_ai.usage.prompt_tokens": 10,
                "gen_ai.usage.completion_tokens": 20,
                "gen_ai.usage.cached_tokens": 4,
                "gen_ai.request.id": "1a2b3c4d5e",
            },
        )
    )
    assert root.engine_format == "sglang" and root.role == "request"
    assert math.isnan(root.queue_time_s) and root.cached_prompt_tokens == 4 and root.ttft_s == 0.2
    stage = classify(raw("prefill_waiting", {}, 0, 250_000_000))
    assert stage.role == "queue_stage" and stage.queue_time_s == pytest.approx(0.25)


def test_tgi_handler_span_parses_rust_durations_and_claims_no_ttft():
    span = classify(
        raw(
            "generate_stream",
            {
                "total_time": "2.5s",
                "validation_time": "850µs",
                "queue_time": "12.5ms",
                "inference_time": "2.4s",
            },
        )
    )
    assert span.engine_format == "tgi" and span.e2e_s == 2.5 and span.queue_time_s == pytest.approx(0.0125)
    assert span.inference_time_s == 2.4 and math.isnan(span.ttft_s) and math.isnan(span.prefill_time_s)
    assert rust_duration_s("1.234567ms") == pytest.approx(0.001234567) and rust_duration_s(
        "7ns"
    ) == pytest.approx(7e-9)
    assert math.isnan(rust_duration_s("soon")) and math.isnan(rust_duration_s(3))


def test_other_spans_and_bad_values_are_not_requests():
    assert classify(raw("EngineCoreProc init", {"code.function": "x"})) is None  # vLLM start-up span
    assert classify(raw("generate", {"parameters": "…"})) is None  # a TGI span without timings
    odd = classify(raw("llm_request", {"gen_ai.latency.e2e": -1.0, "gen_ai.usage.prompt_tokens": True}))
    assert math.isnan(odd.e2e_s) and odd.prompt_tokens is None  # refused, not trusted


def test_json_ids_must_be_hex():
    body = b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","name":"x"}]}]}]}'
    with pytest.raises(MalformedBody):
        parse(body, JSON)
