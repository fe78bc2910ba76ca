"""An OTLP/HTTP trace export body (protobuf or JSON) into `RawSpan`s, with the official
`opentelemetry-proto` messages.

OTLP/JSON differs from protobuf's canonical JSON mapping in one way that matters here: trace
and span ids are hex strings, not base64 (OTLP spec, "JSON Protobuf Encoding"), so they are
turned into base64 before `json_format.ParseDict`; enums may be integers or names, 64-bit
integers strings or numbers, and unknown fields are ignored, as the spec asks of receivers.
A body that does not parse raises `MalformedBody` (the receiver counts it, answers 400 and
keeps nothing of it).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from harness.otlp.formats import RawSpan

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MAX_JSON_DEPTH = 64  # an OTLP body is ~8 levels deep; far more is an attack on the parser


class MalformedBody(ValueError):
    pass


def media_type(content_type: str) -> str | None:
    """PROTOBUF, JSON or None (unsupported) from a Content-Type header."""
    base = content_type.split(";", 1)[0].strip().lower()
    if base in (PROTOBUF, "application/protobuf"):
        return PROTOBUF
    return JSON if base == JSON else None


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind in ("string_value", "bool_value", "int_value", "double_value", "bytes_value"):
        return getattr(v, kind)
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return None  # kvlist values: no engine puts a request figure in one


def _hex_ids(doc: Any) -> None:
    for rs in doc.get("resourceSpans") or []:
        for ss in (rs or {}).get("scopeSpans") or []:
            for span in (ss or {}).get("spans") or []:
                for key in ("traceId", "spanId", "parentSpanId"):
                    value = span.get(key)
                    if isinstance(value, str) and value:
                        try:
                            span[key] = base64.b64encode(bytes.fromhex(value)).decode()
                        except ValueError:
                            raise MalformedBody(f"{key} is not hex: {value[:40]!r}") from None


def _depth_ok(text: bytes) -> bool:
    depth = 0
    for byte in text:
        if byte in (0x7B, 0x5B):  # { [
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return False
        elif byte in (0x7D, 0x5D):
            depth -= 1
    return True


def parse(body: bytes, media: str) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    try:
        if media == PROTOBUF:
            message.ParseFromString(body)
            return message
        if not _depth_ok(body):
            raise MalformedBody(f"JSON nested deeper than {MAX_JSON_DEPTH}")
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise MalformedBody("the JSON body is not an object")
        _hex_ids(doc)
        json_format.ParseDict(doc, message, ignore_unknown_fields=True)
        return message
    except (DecodeError, json_format.ParseError, ValueError, TypeError, AttributeError, RecursionError) as e:
        if isinstance(e, MalformedBody):
            raise
        raise MalformedBody(f"{type(e).__name__}: {str(e)[:200]}") from None


def raw_spans(message: ExportTraceServiceRequest) -> list[RawSpan]:
    out = []
    for rs in message.resource_spans:
        resource = {a.key: _value(a.value) for a in rs.resource.attributes}
        service = resource.get("service.name")
        service = service if isinstance(service, str) else ""
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    RawSpan(
                        s.trace_id.hex(),
                        s.span_id.hex(),
                        s.parent_span_id.hex(),
                        s.name,
                        s.start_time_unix_nano,
                        s.end_time_unix_nano,
                        {a.key: _value(a.value) for a in s.attributes},
                        service,
                        ss.scope.name,
                    )
                )
    return out


def response_body(media: str) -> tuple[bytes, str]:
    """An empty ExportTraceServiceResponse (full success) in the request's encoding."""
    return (b"{}", JSON) if media == JSON else (b"", PROTOBUF)
