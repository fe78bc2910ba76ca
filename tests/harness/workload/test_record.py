"""The request record: error classes of client exceptions and the column contract."""

from __future__ import annotations

from harness.workload.record import COLUMNS, classify_exception


def test_exception_classes() -> None:
    assert classify_exception(ConnectionRefusedError(), during_stream=False) == "connect_error"
    assert classify_exception(TimeoutError(), during_stream=True) == "timeout"
    assert classify_exception(ConnectionResetError(), during_stream=True) == "stream_error"
    assert classify_exception(ValueError(), during_stream=False) == "client_error"


def test_record_columns_contract() -> None:
    required = """request_id worker_id workload endpoint send_time_unix scheduled_time_unix schedule_lag_s
    ttft_s e2e_s itl_s num_chunks prompt_tokens output_tokens usage_source cached_tokens target_prompt_tokens
    target_output_tokens finish_reason status_code error_class ok server_queue_time_s server_prefill_time_s
    server_ttft_s server_decode_time_s server_e2e_s server_num_preemptions
    server_cached_prompt_tokens""".split()
    assert [c for c in COLUMNS if c in required] == required
