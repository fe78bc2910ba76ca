"""Every locustfile runs under plain `locust -f ... --headless` (here against the SSE
stand-in, which counts prompt tokens as words + 7), records what it promises, and Locust's
count matches the records."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.workload.lengths import load_sharegpt
from tests.support.servers import ROOT, locust_requests, standin

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with standin(tmp_path_factory.mktemp("standin"), "ok", 0.002) as u:
        yield u


def locust(url: str, tmp, workload: str, *args: str, seconds: int = 4) -> list[dict]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(ROOT / "loadtests" / f"{workload}.py"),
            "--headless",
            "--host",
            url,
            "-t",
            f"{seconds}s",
            "--json-file",
            str(tmp / "stats"),
            "--records-out",
            str(tmp / "r.jsonl"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(line) for line in (tmp / "r.jsonl").read_text().splitlines()]
    assert locust_requests(tmp / "stats.json") == (len(records), 0)
    return [r for r in records if r["phase"] == "measure"]


def test_chat_from_a_sharegpt_file(url, tmp_path):
    conv = [
        {"conversations": [{"from": "human", "value": "word " * 40}, {"from": "gpt", "value": "word " * 20}]}
    ] * 3
    (tmp_path / "sg.json").write_text(json.dumps(conv + [{"conversations": []}]))
    assert [(p.prompt_tokens, p.output_tokens) for p in load_sharegpt(tmp_path / "sg.json")] == [(52, 26)] * 3
    m = locust(url, tmp_path, "chat", "-u", "2", "-r", "2", "--dataset", str(tmp_path / "sg.json"))
    assert m and all(
        r["target_prompt_tokens"] == 52 == r["prompt_tokens"] for r in m
    )  # calibrated to the server
    assert all(r["output_tokens"] == 26 for r in m)


def test_parallel_sampling_and_completions_endpoint(url, tmp_path):
    m = locust(
        url,
        tmp_path,
        "parallel_sampling",
        "-u",
        "2",
        "-r",
        "2",
        "--n",
        "3",
        "--output-tokens",
        "4",
        "--prompt-tokens",
        "40",
        "--length-spread",
        "0",
        "--endpoint",
        "completions",
    )
    assert m and all(r["n"] == 3 and r["output_tokens"] == 12 and r["num_chunks"] == 12 for r in m)
    assert all(r["prompt_tokens"] == 40 and r["endpoint"] == "completions" for r in m)
    assert all(len(r["itl_s"]) == 9 for r in m)  # gaps within each of the 3 choices


def test_replay_follows_the_trace(url, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "".join(
            json.dumps(
                {
                    "timestamp": 300 * i,
                    "input_length": 600 if i % 2 else 30,
                    "output_length": 3,
                    "hash_ids": [7, i] if i % 2 else [],
                }
            )
            + "\n"
            for i in range(8)
        )
    )
    m = locust(url, tmp_path, "replay", "-u", "4", "-r", "4", "--trace", str(trace), "--time-scale", "0.5")
    assert len(m) == 8
    sched = sorted(r["scheduled_time_unix"] for r in m)
    assert [round(b - a, 3) for a, b in zip(sched, sched[1:])] == [0.15] * 7
    assert all(0 <= r["schedule_lag_s"] < 0.5 for r in m)
    assert sorted(r["prefix_id"] for r in m if r["prefix_id"] is not None) == [7] * 4
    assert sorted({r["prompt_tokens"] for r in m}) == [30, 600]


def test_a_mooncake_trace_becomes_prompts_that_share_its_blocks(url, tmp_path):
    """Requests whose hash ids start alike share that much prompt text (their first prompt
    fingerprint chunks are equal); requests with other first ids share none."""
    trace = ROOT / "tests" / "fixtures" / "traces" / "mooncake_sample.jsonl"
    rows = [json.loads(line) for line in trace.read_text().splitlines()]
    m = locust(url, tmp_path, "replay", "-u", "4", "-r", "4", "--trace", str(trace), "--time-scale", "0.2")
    assert len(m) == len(rows)
    by_time = sorted(m, key=lambda r: r["scheduled_time_unix"])
    first = {}
    for row, rec in zip(rows, by_time):
        assert rec["target_prompt_tokens"] == row["input_length"] == rec["prompt_tokens"]  # calibrated
        first.setdefault(row["hash_ids"][0], set()).add(rec["prompt_chunk_hashes"][0])
    assert all(len(chunks) == 1 for chunks in first.values())  # one text per leading block
    assert len(set().union(*first.values())) == len(first)  # and different blocks differ
    turns = [rec for row, rec in zip(rows, by_time) if row["hash_ids"][0] == 1]
    shared = [
        sum(a == b for a, b in zip(x["prompt_chunk_hashes"], turns[0]["prompt_chunk_hashes"])) for x in turns
    ]
    assert all(s >= 0.8 * len(turns[0]["prompt_chunk_hashes"]) for s in shared), shared


def test_warmup_requests_are_marked_by_their_send_time(url, tmp_path):
    out = subprocess.run(
        [
            sys.executable, "-m", "locust", "-f", str(ROOT / "loadtests" / "long_context.py"), "--headless",
            "--host", url, "-u", "3", "-r", "3", "-t", "4s", "--records-out", str(tmp_path / "r.jsonl"),
            "--warmup-s", "2", "--prompt-tokens", "20", "--output-tokens", "4", "--no-calibrate",
        ],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    warm = [r["send_time_unix"] for r in records if r["phase"] == "warmup"]
    measured = [r["send_time_unix"] for r in records if r["phase"] == "measure"]
    assert len(warm) > 5 and len(measured) > 5 and max(warm) < min(measured)


def test_lengths_spread_around_their_means(url, tmp_path):
    m = locust(
        url, tmp_path, "long_context", "-u", "2", "-r", "2", "--prompt-tokens", "100", "--output-tokens", "8"
    )
    prompts = [r["target_prompt_tokens"] for r in m]
    outputs = {r["output_tokens"] for r in m}
    assert all(75 <= p <= 125 for p in prompts) and len(set(prompts)) > 5 and outputs <= set(range(6, 11))


def test_bursty_shape_ends_itself_and_rate_is_open_loop(url, tmp_path):
    m = locust(
        url,
        tmp_path,
        "bursty",
        "--base-users",
        "1",
        "--step-users",
        "1",
        "--spike-users",
        "4",
        "--period-s",
        "2",
        "--spike-s",
        "1",
        "--output-tokens",
        "4",
        "--prompt-tokens",
        "20",
        seconds=5,
    )
    assert len(m) > 10
    (tmp_path / "rate").mkdir()
    m = locust(
        url,
        tmp_path / "rate",
        "rate",
        "-u",
        "8",
        "-r",
        "8",
        "--rate",
        "20",
        "--arrival",
        "constant",
        "--output-tokens",
        "2",
        "--prompt-tokens",
        "20",
    )
    gaps = sorted(
        round(b - a, 3) for a, b in zip(*(lambda s: (s, s[1:]))(sorted(r["scheduled_time_unix"] for r in m)))
    )
    assert len(m) > 40 and set(gaps) == {0.05}
