"""Property-based: random and mutated expositions never raise out of parse/normalise/ingest,
and whatever a target sends, the exporter's own /metrics stays a valid exposition."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.collector import make_registry
from exporter.dialects import DIALECTS, normalise
from exporter.inspect_cmd import report
from exporter.parse import parse_exposition
from exporter.runner import Exporter, Options
from exporter.scrape import ScrapeResult, Target

DATA = Path(__file__).parent / "data" / "metrics"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.prom"))]
NAMES = [
    "vllm:kv_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
    "vllm:num_preemptions_total",
    "vllm:cache_config_info",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:time_to_first_token_seconds_count",
    "sglang:token_usage",
    "sglang:cached_tokens_total",
    "sglang:max_total_num_tokens",
    "tgi_queue_size",
    "tgi_batch_current_max_tokens",
    "tgi_batch_max_total_tokens",
    "nv_trt_llm_kv_cache_block_metrics",
    "trtllm_kv_cache_reused_blocks_total",
    "llamacpp:requests_processing",
    "lmdeploy:gpu_cache_usage_perc",
    "lmdeploy:backend_config_info",
    "request_success_total",
]
LABELS = [
    "engine",
    "model_name",
    "le",
    "dp_rank",
    "tp_rank",
    "kv_cache_block_type",
    "block_size",
    "num_gpu_blocks",
    "finished_reason",
    "model",
    "version",
    "quant_policy",
]
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-10, 10**9).map(float),
    st.sampled_from([0.0, 1.0, 16.0, 0.99, -1.0]),
)
LABEL_VALUES = st.one_of(
    st.sampled_from(["0", "1", "+Inf", "0.5", "None", "16", "fraction", "max", "m", ""]), st.text(max_size=8)
)


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def expositions(draw) -> str:
    """Syntactically valid text 0.0.4 with engine-like names, random labels and values."""
    lines, seen = [], set()
    for _ in range(draw(st.integers(0, 30))):
        name = draw(st.sampled_from(NAMES))
        labels = draw(st.dictionaries(st.sampled_from(LABELS), LABEL_VALUES, max_size=4))
        text = ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(labels.items()))
        if (name, text) in seen:
            continue
        seen.add((name, text))
        lines.append(f"{name}{{{text}}} {_fmt(draw(VALUES))}" if text else f"{name} {_fmt(draw(VALUES))}")
    return "\n".join(lines) + "\n"


@st.composite
def mutated(draw) -> str:
    """A fixture cut, spliced, byte-flipped, with lines dropped, repeated or rewritten."""
    text = draw(st.sampled_from(FIXTURES))
    lines = text.splitlines()
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["drop", "dup", "flip", "cut", "junk", "colon"]))
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "flip" and lines[i]:
            j = draw(st.integers(0, len(lines[i]) - 1))
            lines[i] = lines[i][:j] + draw(st.characters()) + lines[i][j + 1 :]
        elif op == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        elif op == "junk":
            lines.insert(i, draw(st.text(max_size=40)))
        else:
            lines[i] = lines[i].replace(":", "_")
    return "\n".join(lines)


def _exercise(text: str) -> None:
    exp = parse_exposition(text)
    for dialect in ("auto", *DIALECTS):
        norm = normalise(exp, dialect)
        json.dumps(norm.to_dict(), default=str)
    json.dumps(report(text), allow_nan=False)  # the inspect document is strict JSON


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400))
def test_random_text_never_raises(text: str) -> None:
    _exercise(text)


@settings(max_examples=300, deadline=None)
@given(mutated())
def test_mutated_fixtures_never_raise(text: str) -> None:
    _exercise(text)


@settings(max_examples=120, deadline=None)
@given(expositions())
def test_valid_expositions_parse_like_prometheus_client(text: str) -> None:
    exp = parse_exposition(text)
    ours = {(n, tuple(sorted(lbl.items()))): v for n, rows in exp.samples.items() for lbl, v in rows}
    theirs = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert ours.keys() == theirs.keys()
    assert all(ours[k] == theirs[k] or (math.isnan(ours[k]) and math.isnan(theirs[k])) for k in ours)
    assert exp.malformed == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(expositions(), mutated()), min_size=1, max_size=4))
def test_ingest_then_metrics_output_stays_valid(texts: list[str]) -> None:
    exporter = Exporter([Target("t", "http://127.0.0.1:1/metrics")], Options(window=60))
    registry = make_registry(exporter)
    state = exporter.states[0]
    t0 = time.time()
    for i, text in enumerate(texts):
        exporter.ingest(state, ScrapeResult(text, None, "", 0.01, 200, len(text)), t0 + i)
        out = generate_latest(registry).decode()
        families = list(text_string_to_metric_families(out))  # raises if our output is invalid
        assert any(f.name == "kvscope_target_up" for f in families)
    for d in state.derived.values():
        assert d.preemption_rate is None or d.preemption_rate >= 0
        assert d.hit_ratio is None or 0 <= d.hit_ratio <= 1
