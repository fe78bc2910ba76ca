"""Pure pieces of the harness: SSE timing, calibration, schedules, traces, options, summary."""

from __future__ import annotations

import argparse
import json
import math
import random

import pytest

from harness.workload.arrivals import ArrivalSchedule, constant_offsets, make_offsets
from harness.workload.calibration import Calibration, fit
from harness.workload.lengths import MAX_PROMPT, MAX_TOTAL, sharegpt_like
from harness.workload.options import WORKLOADS, add_to_parser, options_for, to_argv
from harness.workload.profiles import step_and_spike_users
from harness.workload.record import COLUMNS, RequestRecord, classify_exception
from harness.workload.sse import StreamState, consume, finish
from harness.workload.traces import load_trace, trace_offsets


def _rec() -> RequestRecord:
    return RequestRecord("w-1", "w", "chat", "chat", send_time_unix=0.0)


def _feed(lines: list[bytes], times: list[float]) -> tuple[StreamState, RequestRecord]:
    """Run `consume` over canned lines; the clock returns `times` in order (one per read)."""
    it, clock = iter(lines), iter(times)
    state, rec = StreamState(start=0.0), _rec()
    consume(lambda sep: next(it, b""), lambda: next(clock), state, rec)
    finish(state, rec)
    return state, rec


def _data(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n"


def _chat(text, index=0, finish_reason=None, role=False):
    delta = {"role": "assistant", "content": text} if role else {"content": text}
    return {"choices": [{"index": index, "delta": delta, "finish_reason": finish_reason}]}


def test_stream_timing_usage_and_server_timings() -> None:
    usage = {"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}
    timing = {
        "queue_time_s": 0.01,
        "prefill_time_s": 0.02,
        "ttft_s": 0.03,
        "decode_time_s": 0.2,
        "e2e_s": 0.23,
        "num_preemptions": 1,
        "cached_prompt_tokens": 8,
        "arrival_unix": 1.0,
    }
    lines = [
        _data(_chat("", role=True)),
        b"\n",
        _data(_chat("a")),
        b"\n",
        _data(_chat("")),
        b": keepalive\n",
        _data(_chat("c")),
        _data({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}),
        _data({"choices": [], "usage": usage, "kvscope": timing}),
        b"data: [DONE]\n",
    ]
    _, rec = _feed(lines, [0.05, 0.05, 0.10, 0.10, 0.25, 0.25, 0.40, 0.41, 0.42, 0.43, 0.44])
    assert rec.ok and rec.error_class is None
    assert rec.ttft_s == pytest.approx(0.05)  # role + "" goes out with the first token (vLLM, byte tokens)
    assert rec.itl_s == pytest.approx([0.05, 0.15, 0.15])  # "" mid-character tokens count; delta {} does not
    assert rec.e2e_s == pytest.approx(0.44)
    assert (rec.prompt_tokens, rec.output_tokens, rec.cached_tokens, rec.usage_source) == (12, 3, 8, "server")
    assert rec.finish_reason == "length" and rec.num_chunks == 4
    assert rec.server_ttft_s == 0.03 and rec.server_num_preemptions == 1


def test_stream_parallel_choices_have_per_choice_gaps() -> None:
    lines = [
        _data(_chat("a", 0)),
        _data(_chat("x", 1)),
        _data(_chat("b", 0)),
        _data(_chat("y", 1, "stop")),
        _data(_chat("c", 0, "stop")),
        b"data: [DONE]\n",
    ]
    _, rec = _feed(lines, [0.1, 0.1, 0.3, 0.35, 0.5, 0.6, 0.7])
    assert rec.itl_s == pytest.approx([0.2, 0.25, 0.2])
    assert rec.usage_source == "client_count" and rec.output_tokens == 5 and rec.prompt_tokens is None


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        ([_data({"error": {"message": "engine died"}})], "stream_error"),
        ([b"data: {not json\n"], "stream_error"),
        (
            [_data({"choices": [{"index": 0, "text": "a", "finish_reason": None}]})],
            "stream_error",
        ),  # cut, no [DONE]
        (
            [_data({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}), b"data: [DONE]\n"],
            "no_tokens",
        ),
    ],
)
def test_stream_errors_are_classified(lines, error) -> None:
    _, rec = _feed(lines, [0.1] * (len(lines) + 2))
    assert not rec.ok and rec.error_class == error


def test_exception_classes() -> None:
    assert classify_exception(ConnectionRefusedError(), during_stream=False) == "connect_error"
    assert classify_exception(TimeoutError(), during_stream=True) == "timeout"
    assert classify_exception(ConnectionResetError(), during_stream=True) == "stream_error"
    assert classify_exception(ValueError(), during_stream=False) == "client_error"


def test_record_columns_contract() -> None:
    required = """request_id worker_id workload endpoint send_time_unix scheduled_time_unix schedule_lag_s ttft_s e2e_s
    itl_s num_chunks prompt_tokens output_tokens usage_source cached_tokens target_prompt_tokens target_output_tokens
    finish_reason status_code error_class ok server_queue_time_s server_prefill_time_s server_ttft_s
    server_decode_time_s server_e2e_s server_num_preemptions server_cached_prompt_tokens""".split()
    assert [c for c in COLUMNS if c in required] == required


def test_calibration_fit_recovers_overhead_and_slope() -> None:
    cal = fit([(16, 16 * 5 + 30), (112, 112 * 5 + 30)])
    assert cal.measured and cal.per_word == pytest.approx(5) and cal.overhead == pytest.approx(30)
    assert cal.words_for(530) == 100 and cal.words_for(500, include_overhead=False) == 100
    assert fit([(16, 20)]) == Calibration() and Calibration().words_for(0) == 1


def test_schedule_shards_are_disjoint_and_cover_the_global_schedule() -> None:
    glob = ArrivalSchedule(make_offsets("poisson", 50.0, seed=3), 1000.0)
    want = [glob.claim().scheduled_unix for _ in range(300)]
    shards = [ArrivalSchedule(make_offsets("poisson", 50.0, seed=3), 1000.0, i, 3) for i in range(3)]
    got = sorted(s.claim().scheduled_unix for s in shards for _ in range(100))
    assert got == pytest.approx(want)
    assert (want[-1] - want[0]) == pytest.approx(299 / 50.0, rel=0.2)  # Poisson at ~50/s
    const = ArrivalSchedule(constant_offsets(4.0), 0.0, 1, 2)
    assert [const.claim().scheduled_unix for _ in range(3)] == [0.25, 0.75, 1.25]


def test_trace_loading_and_replay_offsets(tmp_path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '# comment\n{"timestamp": 5000, "input_length": 100, "output_length": 10, "hash_ids": [1, 2]}\n'
        '{"arrival_s": 2.0, "prompt_tokens": 50, "output_tokens": 5}\n\n'
    )
    entries = load_trace(path)
    assert [e.arrival_s for e in entries] == [0.0, 3.0] and entries[1].hash_ids == (1, 2)
    sched = ArrivalSchedule(trace_offsets(entries, time_scale=0.5), 100.0)
    assert [(s.scheduled_unix, s.payload.prompt_tokens) for s in (sched.claim(), sched.claim())] == [
        (100.0, 50),
        (101.5, 100),
    ]
    assert sched.claim() is None and sched.exhausted
    path.write_text('{"arrival_s": 1}\n')
    with pytest.raises(ValueError, match=":1:"):
        load_trace(path)


def test_sharegpt_like_lengths_respect_vllm_filter() -> None:
    rng = random.Random(1)
    pairs = [sharegpt_like(rng) for _ in range(5000)]
    assert all(
        4 <= p.prompt_tokens <= MAX_PROMPT and p.prompt_tokens + p.output_tokens <= MAX_TOTAL for p in pairs
    )
    mean_prompt = sum(p.prompt_tokens for p in pairs) / len(pairs)
    assert 120 < mean_prompt < 170  # paper mean 161, lowered a little by the length filter
    assert all(
        p.prompt_tokens + p.output_tokens <= 300 for p in (sharegpt_like(rng, 300) for _ in range(200))
    )


def test_step_and_spike_profile() -> None:
    users = [step_and_spike_users(t, 4, 2, 20, 10.0, 3.0) for t in (0, 6.9, 7.0, 9.9, 10.0, 17.5)]
    assert users == [4, 4, 20, 20, 6, 20]


def test_workload_options_round_trip() -> None:
    parser = argparse.ArgumentParser()
    add_to_parser(parser, options_for("shared_prefix"))
    add_to_parser(parser, options_for("shared_prefix"))  # idempotent: a second locustfile adds nothing
    ns = parser.parse_args(["--prefix-tokens", "64", "--no-calibrate"])
    assert ns.prefix_tokens == 64 and ns.no_calibrate and ns.num_prefixes == 4
    assert to_argv(options_for("shared_prefix"), argparse.Namespace(prefix_tokens=64, no_calibrate=True)) == [
        "--no-calibrate",
        "--prefix-tokens",
        "64",
    ]
    assert {o.dest for o in options_for("rate")} >= {"rate", "prompt_tokens"}
    assert next(o.default for o in options_for("rate") if o.dest == "rate") == 2.0
    assert all(spec.summary for spec in WORKLOADS.values())


def test_run_config_validation(tmp_path) -> None:
    from harness.cli import build_parser
    from harness.run.config import ConfigError, from_args

    parse = build_parser().parse_args
    cfg = from_args(
        parse(
            [
                "run",
                "--workload",
                "shared_prefix",
                "--prefix-tokens",
                "64",
                "--num-blocks",
                "32",
                "--out",
                str(tmp_path),
            ]
        )
    )
    assert cfg.model is None and cfg.users == 8 and not cfg.open_loop
    assert cfg.engine_argv == ["--num-blocks", "32"] and "--prefix-tokens" in cfg.workload_argv
    rate = from_args(parse(["run", "--workload", "rate", "--target", "http://h:1"]))
    assert rate.open_loop and rate.users == 64 and rate.workload_argv[-2:] == ["--rate", "2.0"]
    for argv, match in (
        (["--workload", "chat", "--prefix-tokens", "5"], "has no option"),
        (["--workload", "replay"], "needs --trace"),
        (["--workload", "chat", "--target", "http://h:1", "--num-blocks", "8"], "bundled engine"),
        (["--workload", "chat", "--duration", "soon"], "duration"),
    ):
        with pytest.raises(ConfigError, match=match):
            from_args(parse(["run", *argv]))


def _summary_of(directory, records: list[dict]) -> dict:
    """The bundle's summary as `kvscope run` writes it (harness.analysis.summary)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from harness.analysis.summary import write_summary
    from harness.bundle.write import requests_table

    directory.mkdir()
    pq.write_table(requests_table(records), directory / "requests.parquet")
    pd.DataFrame({"up": pd.Series(dtype=bool)}).to_parquet(directory / "server.parquet")
    (directory / "run.json").write_text("{}")
    return write_summary(directory)


def test_summary_and_bundle_schema_with_no_records(tmp_path) -> None:
    from harness.bundle.write import requests_table

    table = requests_table([])
    assert table.schema.names == list(COLUMNS) and table.num_rows == 0
    s = _summary_of(tmp_path / "empty", [])
    assert s["client"]["requests"] == 0 and s["headline"]["ttft_p50_s"] is None
    rec = _rec()
    rec.ok, rec.ttft_s, rec.e2e_s, rec.itl_s, rec.output_tokens, rec.server_ttft_s = (
        True,
        0.2,
        1.0,
        [0.1] * 8,
        9,
        0.15,
    )
    s = _summary_of(tmp_path / "one", [rec.to_dict()])
    assert s["client"]["ok"] == 1 and s["client"]["tpot_s"]["p50"] == pytest.approx(0.1)
    assert s["client"]["client_overhead_ttft_s"]["p50"] == pytest.approx(0.05)
    assert math.isclose(s["client"]["itl_s"]["p99"], 0.1)


@pytest.mark.slow
def test_prompt_words_are_one_token_each_for_smollm2() -> None:
    """The word list's promise, checked against a real BPE vocabulary (SmolLM2's)."""
    from harness.workload.prompts import WORDS, text
    from reference_engine.model.gguf_loader import _fields, _read
    from reference_engine.model.registry import smollm2_gguf_path
    from reference_engine.model.tokenizer import tokenizer_from_gguf

    path = smollm2_gguf_path()
    tok = tokenizer_from_gguf(_fields(_read(path)), path)
    assert [w for w in WORDS if len(tok.encode(" " + w, add_special_tokens=False)) != 1] == []
    assert len(tok.encode(text(random.Random(0), 1000), add_special_tokens=False)) == 1000
