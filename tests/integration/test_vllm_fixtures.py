"""kvscope's own decoders on what a real vLLM 0.32 (CPU build) sent (tests/fixtures/vllm-0.32-cpu):
the exporter's vllm dialect on the three `/metrics` expositions, the span receiver's decoding
and vLLM span format on the OTLP export bodies (protobuf and OTLP/JSON), and the KV event
subscriber on the ZeroMQ frames, live and replayed. The yardstick is always the capture read
by an independent parser (prometheus_client, opentelemetry-proto, schema-less msgpack)."""

from __future__ import annotations

import json
from collections import Counter

import msgspec
import pytest

from exporter.inspect_cmd import report
from exporter.kv_events.source import SourceState
from exporter.kv_events.spec import KvEventsSource
from exporter.kv_events.wire import STORED, BatchDecoder
from harness.otlp.decode import JSON, PROTOBUF, parse, raw_spans
from harness.otlp.formats import VLLM_ATTRIBUTES, classify
from tests.integration.vllm_fixture import (
    EXPOSITIONS,
    FIXTURE,
    TRACEPARENT,
    exposition,
    live_frames,
    otlp_posts,
    replay_frames,
    requests,
    series,
    value,
)

# canonical quantity -> the vLLM 0.32 sample it must equal (summed over extra labels)
SAME_AS = {
    "kv_usage_ratio": "vllm:kv_cache_usage_perc",
    "prefix_cache_queries_tokens": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits_tokens": "vllm:prefix_cache_hits_total",
    "preemptions": "vllm:num_preemptions_total",
    "requests_running": "vllm:num_requests_running",
    "requests_waiting": "vllm:num_requests_waiting",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "requests_finished": "vllm:request_success_total",
}
RESIDENCY = ("kv_block_lifetime_seconds", "kv_block_idle_before_evict_seconds", "kv_block_reuse_gap_seconds")


def _info(text: str) -> dict[str, str]:
    ((labels, _),) = series(text, "vllm:cache_config_info").items()
    return dict(labels)


@pytest.mark.parametrize("name", EXPOSITIONS)
def test_the_vllm_dialect_reads_every_quantity_as_vllm_states_it(name: str) -> None:
    text = exposition(name)
    doc = report(text)
    assert (doc["dialect"], doc["variant"]) == ("vllm", "v1")
    (inst,) = doc["instances"]
    assert (inst["model"], inst["instance"], inst["labels"]) == (
        "smollm2",
        "0",
        {"model_name": "smollm2", "engine": "0"},
    )
    for quantity, family in SAME_AS.items():
        assert inst[quantity] == value(text, family), quantity
    info = _info(text)
    assert inst["kv_capacity_blocks"] == float(info["num_gpu_blocks"]) == 10
    assert inst["kv_block_size_tokens"] == float(info["block_size"]) == 128
    assert inst["kv_capacity_tokens"] == float(info["kv_cache_size_tokens"]) == 1280
    assert (inst["kv_cache_dtype"], inst["prefix_cache_unit"], inst["enable_prefix_caching"]) == (
        "auto",
        "tokens",
        True,
    )
    assert inst["requests_waiting"] == value(text, "vllm:num_requests_waiting_by_reason")
    for hist in RESIDENCY:
        assert inst["histograms"][hist]["count"] == value(text, f"vllm:{hist}_count"), hist
    assert doc["notes"] == []


def test_kv_cache_size_tokens_is_the_capacity_only_without_a_block_count() -> None:
    """The real exposition, edited: vLLM's group-aware token capacity stands in for an unusable
    num_gpu_blocks, and a figure other than blocks x block size (a hybrid model) is noted."""
    text = exposition("metrics_after_load.txt")
    no_blocks = report(text.replace('num_gpu_blocks="10"', 'num_gpu_blocks="None"'))
    inst = no_blocks["instances"][0]
    assert (inst["kv_capacity_tokens"], inst["kv_capacity_blocks"]) == (1280, 10)
    assert no_blocks["notes"] == [
        "cache_config_info has no usable num_gpu_blocks: KV capacity from kv_cache_size_tokens"
    ]
    hybrid = report(text.replace('kv_cache_size_tokens="1280"', 'kv_cache_size_tokens="4096"'))
    assert hybrid["instances"][0]["kv_capacity_tokens"] == 1280
    (note,) = hybrid["notes"]
    assert "kv_cache_size_tokens=4096, not num_gpu_blocks x block_size = 1280" in note


def test_the_load_shows_in_the_expositions_as_the_readme_says() -> None:
    idle, during, after = (report(exposition(n))["instances"][0] for n in EXPOSITIONS)
    asked = requests()
    burst_prompt = sum(u["prompt_tokens"] for u in asked["burst"])
    assert idle["preemptions"] == 0 and idle["prompt_tokens"] == 0
    assert during["preemptions"] > 0 and during["requests_running"] > 0 and during["kv_usage_ratio"] > 0
    assert after["preemptions"] == during["preemptions"] and after["requests_running"] == 0
    assert after["prompt_tokens"] == asked["first"]["usage"]["prompt_tokens"] + burst_prompt
    assert after["generation_tokens"] == asked["first"]["usage"]["completion_tokens"] + sum(
        u["completion_tokens"] for u in asked["burst"]
    )
    assert after["requests_finished"] == 1 + len(asked["burst"])
    assert (
        0 < after["prefix_cache_hits_tokens"] < after["prefix_cache_queries_tokens"] == after["prompt_tokens"]
    )


def _decoded() -> list[tuple[str, list]]:
    """(file, RawSpans) per export body, decoded by the receiver's own functions."""
    return [(p.name, raw_spans(parse(p.read_bytes(), PROTOBUF))) for p in otlp_posts()]


def test_the_receiver_decodes_every_body_and_keeps_only_request_spans() -> None:
    kept, other = [], []
    for _, raws in _decoded():
        for raw in raws:
            (kept if classify(raw) else other).append(raw)
    asked = requests()
    assert len(kept) == 2 + len(asked["burst"])
    assert all(r.name == "llm_request" for r in kept) and {r.name for r in other} >= {"Overall Loading"}
    assert all(r.scope.startswith("vllm.") and r.name != "llm_request" for r in other)


def test_the_vllm_span_format_maps_every_attribute() -> None:
    spans = [s for _, raws in _decoded() for s in map(classify, raws) if s is not None]
    first, *burst, last = spans
    for span in spans:
        assert (span.engine_format, span.role, span.scope) == ("vllm", "request", "vllm.tracing.otel")
        assert set(span.attributes.split(",")) == set(VLLM_ATTRIBUTES.values())
        # TTFT runs from the API server's arrival; queue and prefill from the engine core's
        # stamps, after tokenization and the hand-over: they add up to a little less
        assert 0 <= span.ttft_s - (span.queue_time_s + span.prefill_time_s) < 0.5
        assert span.prefill_time_s + span.decode_time_s == pytest.approx(span.inference_time_s, abs=1e-6)
        assert span.request_id.startswith("cmpl-")
    asked = requests()
    assert (first.trace_id, first.parent_span_id) == tuple(TRACEPARENT.split("-")[1:3])
    assert last.parent_span_id == "" and all(s.parent_span_id == "" for s in burst)
    for span, usage in ((first, asked["first"]["usage"]), (last, asked["last"]["usage"])):
        assert (span.prompt_tokens, span.completion_tokens) == (
            usage["prompt_tokens"],
            usage["completion_tokens"],
        )
    assert Counter((s.prompt_tokens, s.completion_tokens) for s in burst) == Counter(
        (u["prompt_tokens"], u["completion_tokens"]) for u in asked["burst"]
    )


def test_the_otlp_json_views_decode_to_the_same_spans() -> None:
    for path in otlp_posts():
        view = (FIXTURE / (path.name.split(".")[0] + ".otlp.json")).read_bytes()
        from_json = raw_spans(parse(view, JSON))
        from_pb = raw_spans(parse(path.read_bytes(), PROTOBUF))
        assert from_json == from_pb, path.name
    index = json.loads((FIXTURE / "otlp_posts.json").read_text())
    assert [entry["file"] for entry in index] == [p.name for p in otlp_posts()]
    assert {entry["Content-Type"] for entry in index} == {"application/x-protobuf"}


def test_every_payload_decodes_to_what_it_holds() -> None:
    decoder = BatchDecoder()
    for _, _, payload in live_frames():
        batch = decoder.decode(payload)
        generic = msgspec.msgpack.decode(payload)
        assert (batch.ts, batch.rank, batch.era, batch.unknown) == (generic[0], 0, "map", 0)
        assert [e.__struct_config__.tag for e in batch.events] == [e["type"] for e in generic[1]]
        for event, raw in zip(batch.events, generic[1]):
            if isinstance(event, STORED):
                assert (event.block_hashes, event.parent_block_hash) == (
                    raw["block_hashes"],
                    raw["parent_block_hash"],
                )
                assert msgspec.msgpack.decode(event.token_ids) == raw["token_ids"]
                assert len(raw["token_ids"]) == 128 * len(raw["block_hashes"]) and event.block_size == 128
                assert (event.medium, event.group_idx) == ("GPU", 0)


def _state() -> SourceState:
    return SourceState(KvEventsSource("vllm", "ipc://pub", replay="ipc://replay"))


def _cached_by_hand(messages: list[list[bytes]]) -> set[int]:
    cached: set[int] = set()
    for _, _, payload in messages:
        for event in msgspec.msgpack.decode(payload)[1]:
            if event["type"] == "BlockStored":
                cached |= set(event["block_hashes"])
            elif event["type"] == "BlockRemoved":
                cached -= set(event["block_hashes"])
            else:
                cached.clear()
    return cached


def _cached(state: SourceState) -> set[int]:
    return set(state.instances["0"].tiers["GPU"].cached)


def test_the_live_frames_rebuild_vllms_cached_set_step_by_step() -> None:
    messages, state = live_frames(), _state()
    for n, frames in enumerate(messages, 1):
        assert frames[0] == b"kv" and int.from_bytes(frames[1], "big") == n - 1
        assert state.live_frames(frames, 0.0) is None
        assert _cached(state) == _cached_by_hand(messages[:n])
    assert _cached_by_hand(messages[:-1]), "blocks were cached before the reset"
    assert _cached(state) == set() and state.instances["0"].cleared == 1
    assert state.problems == {}


def test_the_real_replay_fills_a_gap() -> None:
    """The replayed seqs arrive only by replay: the newest live one reveals the gap, the
    ROUTER's answer (as a DEALER received it) fills it."""
    messages, replayed = live_frames(), replay_frames()
    first = int.from_bytes(replayed[0][2], "big")
    state = _state()
    for frames in messages[:first]:
        state.live_frames(frames, 0.0)
    assert state.live_frames(messages[-1], 0.0) == first
    for k, frames in enumerate(replayed):
        assert state.replay_frames(frames) == (k == len(replayed) - 1)
    assert replayed[-1] == [b"", b"", b"\xff" * 8, b""]
    assert _cached(state) == _cached_by_hand(messages) and state.problems == {"gap": 1}
