"""`kvscope run --otlp` end to end on CPU (the bundled engine, simulated, loopback): the engine
exports vLLM's `llm_request` span to the run's receiver; every successful request has exactly
one joined span whose queue, TTFT and E2E equal the SSE object's within 1 ms; with the SSE
object turned off (--no-kvscope-timing), the self-check still runs per request, from spans."""

from __future__ import annotations

import pytest

from harness.results import load
from tests.support.servers import kvscope_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
RUN = ["--workload", "chat", "--simulate", "--sim-model", "llama-3.1-8b", "--users", "6", "--duration", "5s",
       "--max-output-tokens", "48", "--no-advise", "--otlp"]  # fmt: skip


@pytest.fixture(autouse=True)
def fast_span_batches(monkeypatch):
    """The SDK's 5 s batch delay (vLLM's too) would only make the test wait: the grace period's
    handling of it is the same at 0.2 s. The bundled engine inherits this environment."""
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")


def test_every_successful_request_has_one_span_equal_to_the_sse_object(tmp_path):
    rc, log, _ = kvscope_run(*RUN, "--out", str(tmp_path / "b"))
    assert rc == 0, log
    assert "OTLP trace receiver: http://127.0.0.1:" in log
    b = load(tmp_path / "b")
    ok = b.requests[b.requests["ok"]]
    assert len(ok) >= 10 and ok["trace_id"].str.fullmatch("[0-9a-f]{32}").all()
    assert (ok["server_timing_source"] == "kvscope").all()
    spans = b.spans[b.spans["role"] == "request"]
    assert spans["trace_id"].is_unique and set(spans["trace_id"]) == set(ok["trace_id"])
    joined = ok.merge(spans, on="trace_id", suffixes=("", "_span"))
    assert len(joined) == len(ok)
    for sse, span in (("server_queue_time_s", "queue_time_s"), ("server_ttft_s", "ttft_s_span"),
                      ("server_e2e_s", "e2e_s_span")):  # fmt: skip
        assert (joined[sse] - joined[span]).abs().max() < 1e-3, sse
    stats = b.run["spans"]
    assert f"spans: {len(ok)} of {len(ok)} successful requests joined (0 missing" in log
    assert stats["join"]["joined"] == len(ok) and stats["join"]["missing"] == 0
    assert stats["join"]["unknown_trace"] == 0 and stats["receiver"]["bodies_malformed"] == 0
    assert b.summary["selfcheck"]["method"] == "per_request"


def test_without_the_sse_object_the_self_check_runs_from_spans(tmp_path):
    rc, log, _ = kvscope_run(*RUN, "--no-kvscope-timing", "--out", str(tmp_path / "b"))
    assert rc == 0, log
    b = load(tmp_path / "b")
    ok = b.measured[b.measured["ok"]]
    assert len(ok) >= 5 and (ok["server_timing_source"] == "otlp:vllm").all()
    assert ok["server_ttft_s"].notna().all() and ok["server_queue_time_s"].notna().all()
    assert (ok["ttft_s"] >= ok["server_ttft_s"]).all()  # the client's TTFT holds the server's
    check = b.summary["selfcheck"]
    assert check["method"] == "per_request" and check["delay_floor_s"] is not None
    split = b.summary["server_split"]
    assert split["rows"] and "gen_ai.latency.time_in_queue" in split["source_text"]["otlp:vllm"]
    report = (tmp_path / "b" / "report.html").read_text()
    assert "Server-side split by latency band" in report and "llm_request" in report
