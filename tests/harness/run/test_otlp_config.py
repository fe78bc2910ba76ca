"""`kvscope run --otlp`'s options and wiring, checked without starting anything."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.cli import build_parser
from harness.run.config import ConfigError, RunConfig, from_args
from harness.run.otlp import engine_env, engine_flags, receiver_command
from harness.run.otlp_config import DEFAULT_GRACE_S
from harness.run.state import Run


def config(*argv: str) -> RunConfig:
    return from_args(build_parser().parse_args(["run", "--workload", "chat", *argv]))


def test_otlp_options():
    assert config().otlp is None
    on = config("--otlp")
    assert (
        on.otlp.listen == ("127.0.0.1", 0) and on.otlp.grace_s == DEFAULT_GRACE_S > 5.0
    )  # vLLM's batch delay
    given = config("--otlp-listen", "0.0.0.0:4318", "--otlp-grace", "12s")
    assert given.otlp.listen == ("0.0.0.0", 4318) and given.otlp.grace_s == 12.0
    assert config("--otlp", "--no-kvscope-timing").engine_argv == ["--no-kvscope-timing"]
    assert given.to_dict()["otlp"]["listen"] == ("0.0.0.0", 4318)
    for argv, match in (
        (["--otlp-grace", "3s"], "needs --otlp"),
        (["--otlp", "--otlp-grace", "x"], "otlp-grace"),
    ):
        with pytest.raises(ConfigError, match=match):
            config(*argv)


def test_the_bundled_engine_is_pointed_at_the_receiver_over_http(tmp_path: Path):
    run = Run(config("--otlp", "--out", str(tmp_path / "b")))
    assert engine_flags(run) == [] and engine_env(run, None) is None  # before the receiver listens
    run.otlp_endpoint = "http://127.0.0.1:4318/v1/traces"
    assert engine_flags(run) == ["--otlp-traces-endpoint", run.otlp_endpoint]
    assert engine_env(run, {"A": "1"}) == {"A": "1", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
    assert (
        receiver_command("::1", 0, "d", 5)[-5:]
        == ["--listen", "[::1]:0", "--out", "d", "--max-spans", "5"][-5:]
    )


def test_traceparent_is_w3c_with_a_fresh_trace_id_recorded():
    from harness.workload.record import RequestRecord
    from harness.workload.trace_context import traceparent

    recs = [RequestRecord("r", "w", "chat", "chat", 0.0) for _ in range(3)]
    headers = [traceparent(r) for r in recs]
    for rec, header in zip(recs, headers):
        assert re.fullmatch(r"00-([0-9a-f]{32})-[0-9a-f]{16}-01", header).group(1) == rec.trace_id
    assert len({r.trace_id for r in recs}) == 3


def test_a_half_written_endpoint_file_is_not_read(tmp_path: Path):
    from harness.run.otlp import _endpoint

    path = tmp_path / "endpoint.json"
    assert _endpoint(path) is None
    path.write_text("")
    assert _endpoint(path) is None  # the receiver had not finished writing it
    path.write_text('{"endpoint": "http://127.0.0.1:1/v1/traces"}\n')
    assert _endpoint(path) == "http://127.0.0.1:1/v1/traces"
