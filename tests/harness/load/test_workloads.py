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
