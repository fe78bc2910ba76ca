"""`kvscope run` when things go wrong: an unreachable target fails fast with a clear message
(exit 4); a server answering 500s and 429s yields error counts by class and a bundle, not a
crash, and exits 3 (errors above --max-error-rate)."""

from __future__ import annotations

import json

import pytest

from harness.results import load
from harness.run.procs import free_port
from tests.support.servers import kvscope_run, locust_requests, standin

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_unreachable_target_fails_fast(tmp_path):
    """A target that never answered: exit 4 within seconds, and no request was ever sent
    (Locust is not started), so no failure is generated at all."""
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    rc, log, seconds = kvscope_run(
        "--target", url, "--workload", "chat", "--kv-events", "auto", "--out", str(tmp_path / "b")
    )
    assert rc == 4 and seconds <= 10, (rc, seconds, log)
    assert f"cannot reach the target {url}" in log
    assert log.strip().splitlines()[-1].startswith("kvscope run: exit 4 (target_unreachable)")
    run = json.loads((tmp_path / "b" / "run.json").read_text())
    assert run["commands"] == {} and not (tmp_path / "b" / "raw" / "records.jsonl").exists()
    assert "kv events: none subscribed" in log  # asked for, and said, even here


def test_error_responses_are_counted_by_class(tmp_path):
    with standin(tmp_path, "mixed") as url:
        rc, log, _ = kvscope_run(
            "--target",
            url,
            "--workload",
            "chat",
            "--users",
            "3",
            "--duration",
            "4s",
            "--max-output-tokens",
            "8",
            "--no-calibrate",
            "--out",
            str(tmp_path / "b"),
        )
    assert rc == 3, log  # 2 in 3 failed: a bundle with the errors as data, and a non-zero exit
    r = load(tmp_path / "b")
    assert r.run["status"] == "errors" and r.summary["run"]["status"] == "errors"
    errors = r.summary["client"]["errors_by_class"]
    assert errors.get("http_5xx", 0) > 0 and errors.get("http_4xx", 0) > 0, errors
    assert set(r.requests["status_code"]) == {200, 429, 500}
    assert (r.requests.loc[r.requests["status_code"] == 429, "error_class"] == "http_4xx").all()
    assert r.requests.loc[~r.requests["ok"], "error_message"].str.contains("HTTP").all()
    total, failed = locust_requests(tmp_path / "b" / "locust" / "stats.json")
    assert total == len(r.requests) and failed == (~r.requests["ok"]).sum()


def test_all_failing_server_exits_non_zero_with_a_bundle(tmp_path):
    with standin(tmp_path, "status_500") as url:
        rc, log, _ = kvscope_run(
            "--target",
            url,
            "--workload",
            "long_context",
            "--users",
            "2",
            "--duration",
            "3s",
            "--out",
            str(tmp_path / "b"),
        )
    assert rc == 3 and "exit 3 (errors)" in log, log
    r = load(tmp_path / "b")
    assert r.summary["client"]["ok"] == 0 and set(r.summary["client"]["errors_by_class"]) == {"http_5xx"}


def test_broken_streams_and_missing_usage(tmp_path):
    with standin(tmp_path, "broken") as url:
        rc, log, _ = kvscope_run(
            "--target",
            url,
            "--workload",
            "rate",
            "--rate",
            "10",
            "--duration",
            "3s",
            "--output-tokens",
            "8",
            "--no-calibrate",
            "--out",
            str(tmp_path / "b"),
        )
    assert rc == 3, log
    assert set(load(tmp_path / "b").requests["error_class"]) == {"stream_error"}
    with standin(tmp_path, "no_usage") as url:
        rc, log, _ = kvscope_run(
            "--target",
            url,
            "--workload",
            "parallel_sampling",
            "--n",
            "2",
            "--users",
            "2",
            "--duration",
            "3s",
            "--output-tokens",
            "5",
            "--length-spread",
            "0",
            "--out",
            str(tmp_path / "c"),
        )
    assert rc == 0, log
    m = load(tmp_path / "c").measured
    assert (m["usage_source"] == "client_count").all() and (m["output_tokens"] == 10).all()
    assert m["prompt_tokens"].isna().all()
