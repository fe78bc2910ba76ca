"""The bundled engine's imitations of vLLM held to a real vLLM 0.32 (CPU build), captured in
tests/fixtures/vllm-0.32-cpu: a divergence fails here, whichever side moved.

- `/metrics`: every `vllm:*` family the bundled engine exports exists in vLLM's exposition
  with the same type, the same label names and the same bucket bounds.
- Request spans: the bundled engine's `llm_request` span, sent through the real SDK and OTLP
  exporter to a loopback endpoint, has vLLM's name, kind, scope, flags, parent handling,
  resource keys and attribute names with the same value types, for the same request.
- KV events: every real payload re-encodes with the bundled structures to the same bytes,
  map headers aside; the bundled block pool's events carry exactly the fields vLLM's carry;
  the bundled publisher, given the real batches, sends the frames vLLM sent, live and on
  replay.
The differences kept on purpose are listed, with their reasons, below the imports.
"""

from __future__ import annotations

import tempfile
import time

import msgspec
import pytest
import zmq
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from reference_engine.block_hash import hash_block_tokens
from reference_engine.block_pool import BlockPool
from reference_engine.kv_events.config import KVEventsConfig
from reference_engine.kv_events.events import KVEventBatch
from reference_engine.kv_events.publisher import ZmqEventPublisher
from reference_engine.sampling_params import SamplingParams
from reference_engine.server.events import Outcome
from reference_engine.server.metrics import LiveGauges, VllmMetrics, cache_config_labels
from reference_engine.server.timing import RequestTiming
from reference_engine.server.tracing import RequestTracer
from tests.integration.vllm_fixture import (
    TRACEPARENT,
    exposition,
    families,
    live_frames,
    otlp_posts,
    replay_frames,
)
from tests.support.otlp_bodies import otlp_bodies

# The differences from vLLM 0.32 kept on purpose; the tests allow exactly these, nothing else.
# 1. cache_config_info's labels: the bundled engine states the cache facts kvscope reads
#    (block_size, num_gpu_blocks, cache_dtype, enable_prefix_caching), a subset of vLLM's 40,
#    plus `allocator` (paged or contiguous), which the advisor reads; vLLM's other labels
#    describe features the bundled engine lacks.
# 2. BlockStored's msgpack map header: the KV event structures are vLLM 0.33.0's, with one
#    optional field more than 0.32's, so msgspec writes map16 where 0.32 writes fixmap (the
#    same keys, order and values).
# 3. The span resource's `vllm.instrumenting_module_name` value: kvscope.reference_engine
#    where vLLM writes vllm.llm_engine (the key is the same).
EXTRA_INFO_LABELS = frozenset({"allocator"})  # difference 1


def bundled_exposition() -> str:
    """The bundled engine's /metrics as its server renders it, every family with a series, the
    same model length as the capture (`--max-model-len 1024`: token buckets depend on it)."""
    zero = LiveGauges(lambda: 0.0, lambda: 0.0, lambda: 0.0)
    info = cache_config_labels(128, 10, "auto", True, "paged")
    metrics = VllmMetrics("smollm2", 1024, info, zero, kv_cache_metrics=True)
    return metrics.render()[0].decode()


def test_every_imitated_metric_family_is_vllms_with_the_same_type_labels_and_buckets() -> None:
    ours = {k: v for k, v in families(bundled_exposition()).items() if k.startswith("vllm:")}
    theirs = families(exposition("metrics_after_load.txt"))
    assert len(ours) >= 20, sorted(ours)
    problems = []
    for name, fam in sorted(ours.items()):
        real = theirs.get(name)
        if real is None:
            problems.append(f"{name}: not in vLLM 0.32's exposition")
            continue
        if fam.type != real.type:
            problems.append(f"{name}: type {fam.type}, vLLM's {real.type}")
        if name == "vllm:cache_config_info":
            extra = fam.labels - real.labels
            if extra != EXTRA_INFO_LABELS:
                problems.append(
                    f"{name}: labels vLLM lacks {sorted(extra)}, allowed {sorted(EXTRA_INFO_LABELS)}"
                )
        elif fam.labels != real.labels:
            problems.append(f"{name}: labels {sorted(fam.labels)}, vLLM's {sorted(real.labels)}")
        if fam.buckets != real.buckets:
            problems.append(f"{name}: buckets {fam.buckets}, vLLM's {real.buckets}")
    assert not problems, "\n".join(problems)


def _attrs(span: Span) -> dict[str, str]:
    """Attribute name -> the AnyValue kind it was sent as (double_value, int_value, ...)."""
    return {a.key: a.value.WhichOneof("value") for a in span.attributes}


def _resource_keys(body: bytes) -> set[str]:
    message = ExportTraceServiceRequest.FromString(body)
    return {a.key for rs in message.resource_spans for a in rs.resource.attributes}


def _real_request_spans() -> list[tuple[Span, str, set[str]]]:
    """(span, scope name, resource keys) of every real `llm_request`, in posting order."""
    out = []
    for path in otlp_posts():
        message = ExportTraceServiceRequest.FromString(path.read_bytes())
        for rs in message.resource_spans:
            keys = {a.key for a in rs.resource.attributes}
            out += [
                (s, ss.scope.name, keys) for ss in rs.scope_spans for s in ss.spans if s.name == "llm_request"
            ]
    return out


def _bundled_span(monkeypatch, params: SamplingParams, traceparent: str | None) -> tuple[Span, str, set[str]]:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    timing = RequestTiming(
        queue_time_s=0.01,
        prefill_time_s=0.05,
        ttft_s=0.06,
        decode_time_s=0.4,
        e2e_s=0.46,
        num_preemptions=0,
        cached_prompt_tokens=0,
        arrival_unix=time.time() - 0.46,
    )
    outcome = Outcome(prompt_tokens=5, completion_tokens=params.max_tokens, cached_tokens=0, timing=timing)
    with otlp_bodies() as rec:
        tracer = RequestTracer(rec.endpoint)
        tracer.emit({"traceparent": traceparent} if traceparent else {}, "cmpl-parity-0", params, outcome)
        tracer.shutdown()
        (post,) = rec.posts
    message = ExportTraceServiceRequest.FromString(post.body)
    ((span, scope),) = [
        (s, ss.scope.name) for rs in message.resource_spans for ss in rs.scope_spans for s in ss.spans
    ]
    return span, scope, _resource_keys(post.body)


@pytest.mark.parametrize(
    "real_index, params, traceparent",
    [
        (0, SamplingParams(max_tokens=8, temperature=0.0), TRACEPARENT),  # request 1, a remote parent
        (-1, SamplingParams(max_tokens=2, temperature=0.5), None),  # the last one, sampled, a root
    ],
    ids=["temperature0-with-parent", "temperature0.5-root"],
)
def test_the_bundled_request_span_is_vllms(monkeypatch, real_index, params, traceparent) -> None:
    real, real_scope, real_resource = _real_request_spans()[real_index]
    ours, scope, resource = _bundled_span(monkeypatch, params, traceparent)
    assert (ours.name, ours.kind, scope) == (real.name, real.kind, real_scope)
    assert ours.flags == real.flags  # parent is remote (768) or there is none (256)
    if traceparent:
        assert (ours.trace_id, ours.parent_span_id) == (real.trace_id, real.parent_span_id)
    else:
        assert ours.parent_span_id == real.parent_span_id == b""
    assert _attrs(ours) == _attrs(real)
    # the SDK's service.* and telemetry.*, vllm.instrumenting_module_name (its value is
    # difference 3) and vllm.process_id
    assert resource == real_resource


def test_the_real_spans_end_when_the_request_ends_as_the_bundled_engine_assumes() -> None:
    """Both engines start the span at arrival and end it when it is made, so its duration is the
    e2e latency; the bundled engine reports the same."""
    for span, _, _ in _real_request_spans():
        e2e = next(a.value.double_value for a in span.attributes if a.key == "gen_ai.latency.e2e")
        assert abs((span.end_time_unix_nano - span.start_time_unix_nano) / 1e9 - e2e) < 0.05


def _generic(payload: bytes) -> list:
    return msgspec.msgpack.decode(payload)


def smallest_headers(payload: bytes) -> bytes:
    """The payload with every map and array header at its smallest width (values untouched)."""
    return msgspec.msgpack.encode(_generic(payload))


def test_every_real_payload_reencodes_with_the_bundled_structures_to_the_same_bytes() -> None:
    """Difference 2 (top of the module): 0.33's BlockStored has `lookahead_token_ids` too
    (omitted when None). msgspec sizes a struct's map header for every field it may write: 16
    entries need a map16 header (0xde 0x00 N), so 0.33 writes 3 bytes where 0.32 writes the
    1-byte fixmap (0x80|N) for the same N entries. Keys, their order and every value are the
    same; the header is the only byte that differs."""
    messages = live_frames()
    assert len(messages) >= 5
    decoder, encoder = msgspec.msgpack.Decoder(KVEventBatch), msgspec.msgpack.Encoder()
    for _, _, payload in messages:
        ours = encoder.encode(decoder.decode(payload))
        stores = sum(e["type"] == "BlockStored" for e in _generic(payload)[1])
        assert smallest_headers(payload) == payload, "vLLM 0.32 writes the smallest headers"
        assert smallest_headers(ours) == payload
        assert len(ours) - len(payload) == 2 * stores  # map16 for fixmap, per BlockStored only


def _kinds(payload: bytes) -> dict[str, dict]:
    """The first event of each kind in a payload, schema-less; a store with a parent is a kind."""
    out: dict[str, dict] = {}
    for event in _generic(payload)[1]:
        out.setdefault(
            event["type"] + (" with parent" if event.get("parent_block_hash") is not None else ""), event
        )
    return out


def _bundled_pool_events() -> dict[str, dict]:
    """One event of each kind, recorded by the bundled block pool as the engine drives it."""
    pool = BlockPool(3, block_size=128, enable_kv_events=True)  # two usable blocks
    tokens = tuple(range(128))
    first, second = (
        hash_block_tokens(None, tokens),
        hash_block_tokens(hash_block_tokens(None, tokens), tokens),
    )
    (a,) = pool.get_new_blocks(1)
    pool.cache_full_blocks([a], [first], [tokens], None)
    (b,) = pool.get_new_blocks(1)
    pool.cache_full_blocks([b], [second], [tokens], first)
    pool.free_blocks([a, b])
    pool.free_blocks(pool.get_new_blocks(1))  # the oldest cached block is handed out again: removed
    assert pool.reset_prefix_cache()
    batch = KVEventBatch(ts=1.0, events=pool.take_events(), data_parallel_rank=0)
    return _kinds(msgspec.msgpack.Encoder().encode(batch))


def test_the_bundled_pool_writes_the_fields_vllm_writes() -> None:
    real: dict[str, dict] = {}
    for _, _, payload in live_frames():
        real = {**_kinds(payload), **real}
    ours = _bundled_pool_events()
    assert (
        set(ours)
        == set(real)
        == {"BlockStored", "BlockStored with parent", "BlockRemoved", "AllBlocksCleared"}
    )
    for kind, event in real.items():
        assert list(ours[kind]) == list(event), kind  # the same keys, in the same order
        for key in (
            "type",
            "block_size",
            "medium",
            "group_idx",
            "kv_cache_spec_kind",
            "lora_id",
            "lora_name",
        ):
            if key in event:
                assert ours[kind][key] == event[key], (kind, key)
        if "extra_keys" in event:  # one null per block for plain text
            assert event["extra_keys"] == [None] * len(event["block_hashes"])
            assert ours[kind]["extra_keys"] == [None] * len(ours[kind]["block_hashes"])


def test_the_bundled_publisher_sends_vllms_frames_live_and_on_replay() -> None:
    """The real batches through the bundled publisher. PUB/SUB drops what is sent before the
    subscription arrives, so copies of the first batch go out until one is received; the
    real ones follow, their seq shifted by the probes sent (vLLM's started at 0)."""
    real_live, real_replay = live_frames(), replay_frames()
    assert [int.from_bytes(seq, "big") for _, seq, _ in real_live] == list(range(len(real_live)))
    topic = real_live[0][0].decode()
    batches = [msgspec.msgpack.Decoder(KVEventBatch).decode(payload) for _, _, payload in real_live]
    ctx = zmq.Context()
    with tempfile.TemporaryDirectory(prefix="kvscope-parity-") as tmp:
        config = KVEventsConfig(True, "zmq", f"ipc://{tmp}/pub", f"ipc://{tmp}/replay", topic=topic)
        publisher = ZmqEventPublisher(config)
        sub, dealer = ctx.socket(zmq.SUB), ctx.socket(zmq.DEALER)
        try:
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.connect(publisher.endpoint)
            probes = 0
            while not sub.poll(100):
                assert probes < 100, "the subscriber never joined"
                publisher.publish(batches[0])
                probes += 1
            assert publisher.drain(10.0)
            while sub.poll(300):
                sub.recv_multipart()
            for batch in batches:
                publisher.publish(batch)
            ours_live = [sub.recv_multipart() for _ in batches if sub.poll(10_000)]
            dealer.connect(publisher.replay_endpoint)
            start = int.from_bytes(real_replay[0][2], "big") + probes
            dealer.send_multipart([b"", start.to_bytes(8, "big")])
            ours_replay = []
            while dealer.poll(10_000):
                ours_replay.append(dealer.recv_multipart())
                if ours_replay[-1][1] == b"":  # the end marker
                    break
        finally:
            publisher.shutdown()
            sub.close(linger=0)
            dealer.close(linger=0)
            ctx.term()

    def shifted(frames: list[bytes], at: int) -> list[bytes]:
        seq = int.from_bytes(frames[at], "big")
        return (
            frames
            if seq == 2**64 - 1
            else [*frames[:at], (seq - probes).to_bytes(8, "big"), *frames[at + 1 :]]
        )

    # the payload frame up to its map headers' width (see the re-encoding test above)
    assert [[*shifted(f, 1)[:2], smallest_headers(f[2])] for f in ours_live] == real_live
    assert [[*shifted(f, 2)[:3], smallest_headers(f[3]) if f[3] else b""] for f in ours_replay] == real_replay
