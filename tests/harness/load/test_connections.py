"""Connection-level failures as `kvscope run` records them (tests/support/http_faults.py): a
keep-alive connection the server closed before answering is retried once on a fresh one and
counted in `retries`, not failed; one that drops after bytes arrived stays a stream error; a
server that never answers, or stops mid-stream, gives `timeout` records, never
`client_error`; one that keeps sending, however slowly, is waited for."""

from __future__ import annotations

import pytest

from harness.results import load
from harness.run.outcome import Exit
from tests.support.servers import http_faults, kvscope_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
COMMON = ("--workload", "chat", "--no-calibrate", "--max-output-tokens", "5")


def run_against(tmp_path, mode: str, *args: str):
    """`kvscope run` against tests/support/http_faults.py in MODE: (exit status, log, requests)."""
    with http_faults(tmp_path, mode) as url:
        rc, log, _ = kvscope_run("--target", url, *COMMON, *args, "--out", str(tmp_path / "b"))
    return rc, log, load(tmp_path / "b")


def test_a_stale_keep_alive_connection_is_retried_not_failed(tmp_path):
    rc, log, bundle = run_against(
        tmp_path, "stale", "--users", "2", "--think-time", "0.6", "--duration", "4s"
    )
    assert rc == 0, log
    requests = bundle.requests
    assert len(requests) >= 6 and requests["ok"].all(), requests[["error_class", "error_message"]]
    assert bundle.summary["client"]["retried"] == requests["retries"].sum() and "retried on a fresh" in log
    # Every request after a user's first waited 0.6 s on an idle connection, which the server
    # then closed on arrival: each was sent once more, on a fresh connection.
    assert (requests["retries"] == 1).sum() >= len(requests) - 2
    assert set(requests["retries"]) <= {0, 1}


def test_a_connection_dropped_after_bytes_arrived_stays_an_error(tmp_path):
    rc, log, bundle = run_against(tmp_path, "drop", "--users", "1", "--duration", "2s")
    assert rc == Exit.ERRORS, log  # none succeeded
    requests = bundle.requests
    assert len(requests) >= 2 and set(requests["error_class"]) == {"stream_error"}
    assert (requests["retries"] == 0).all()


def test_a_hanging_server_gives_timeout_records(tmp_path):
    rc, log, bundle = run_against(
        tmp_path, "hang", "--users", "2", "--duration", "3s", "--request-timeout", "1"
    )
    assert rc == Exit.ERRORS and "no request succeeded" in log, log
    requests = bundle.requests
    assert len(requests) >= 4 and set(requests["error_class"]) == {"timeout"}, requests["error_message"]
    assert (requests["e2e_s"] >= 0.9).all() and (requests["retries"] == 0).all()


def test_a_stream_that_stops_mid_way_times_out_after_the_request_timeout(tmp_path):
    rc, log, bundle = run_against(
        tmp_path, "stall", "--users", "2", "--duration", "3s", "--request-timeout", "1"
    )
    assert rc == Exit.ERRORS, log
    requests = bundle.requests
    assert len(requests) >= 4 and set(requests["error_class"]) == {"timeout"}, requests["error_message"]
    assert requests["ttft_s"].notna().all()  # the first events were read and timed
    # a second of silence after the last byte, then the record: no sooner, and not much later
    assert (requests["e2e_s"] >= 0.95).all() and (requests["e2e_s"] < 2.5).all(), requests["e2e_s"]


def test_a_slow_stream_that_keeps_sending_is_not_timed_out(tmp_path):
    """Seven events 0.4 s apart take 2.8 s: past a 1 s --request-timeout in all, never in one wait."""
    rc, log, bundle = run_against(
        tmp_path, "trickle", "--users", "2", "--duration", "2s", "--request-timeout", "1"
    )
    assert rc == 0, log
    requests = bundle.requests
    assert len(requests) >= 2 and requests["ok"].all(), requests[["error_class", "error_message"]]
    assert (requests["e2e_s"] >= 2.4).all() and (requests["output_tokens"] == 5).all()
