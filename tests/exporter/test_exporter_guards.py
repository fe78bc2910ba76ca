"""The exporter's guards one by one: capped streaming decompression, parse limits, the
impossible-value rule, credential specs and redaction, the redirect policy, and the command
line (start-up line and errors never show a secret)."""

from __future__ import annotations

import gzip
import math
import subprocess
import sys
import time
import zlib

import pytest

from exporter.credentials import CredentialError, parse_auth, redact_url, split_userinfo
from exporter.dialects import normalise
from exporter.dialects.sample import EngineSample, HistogramSample
from exporter.dialects.sanity import drop_impossible
from exporter.inflate import STEP_BYTES, BodyError, CappedBody
from exporter.parse import parse_exposition
from exporter.redirects import refusal, resolve
from tests.support.paths import ROOT
from tests.support.prometheus import free_port

MiB = 1 << 20


def feed_all(body: CappedBody, data: bytes, chunk: int = 1 << 16):
    for i in range(0, len(data), chunk):
        if isinstance(error := body.feed(data[i : i + chunk]), BodyError):
            return error
    return body.finish()


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate", ""])
def test_capped_body_round_trips_and_refuses_past_the_cap(encoding):
    text = b'vllm:num_requests_running{engine="0"} 1\n' * 20_000  # ~800 KB
    if encoding == "gzip":
        data = gzip.compress(text)
    elif encoding == "deflate":
        data = zlib.compress(text)
    elif encoding == "raw-deflate":
        z = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        data = z.compress(text) + z.flush()
    else:
        data = text
    header = "deflate" if encoding == "raw-deflate" else encoding
    assert bytes(feed_all(CappedBody(header, len(text)), data)) == text
    refused = feed_all(CappedBody(header, len(text) - 1), data)
    assert isinstance(refused, BodyError) and refused.reason == "too_large"


def test_a_bomb_is_refused_within_its_first_chunk_in_bounded_steps():
    bomb = gzip.compress(b"\0" * (64 * MiB))
    body = CappedBody("gzip", 4 * MiB)
    error, steps = body.feed(bomb[: 1 << 16]), 1
    while error is None and body.pending:
        error, steps = body.step(), steps + 1
    assert isinstance(error, BodyError) and error.reason == "too_large"
    assert steps <= 4 * MiB // STEP_BYTES + 1  # each step inflates at most STEP_BYTES
    assert body.feed(bomb[1 << 16 :]) is error and body.finish() is error and not body.pending


def test_gzip_without_a_header_and_corrupt_or_unknown_encodings():
    text = b"a 1\n" * 100
    assert bytes(feed_all(CappedBody("", MiB), gzip.compress(text))) == text
    corrupt = feed_all(CappedBody("gzip", MiB), b"\x1f\x8bnot gzip")
    assert isinstance(corrupt, BodyError) and corrupt.reason == "decode"
    unknown = feed_all(CappedBody("br", MiB), b"\x8b\x00")
    assert isinstance(unknown, BodyError) and "br" in unknown.detail


def test_parsing_stops_at_its_limits_whatever_the_body():
    lines = "x\n" * 2_000_000  # 4 MB of malformed one-character lines
    t0 = time.perf_counter()
    exp = parse_exposition(lines, max_samples=1000, max_lines=4000)
    assert exp.over_limit == "samples" and exp.malformed == 1000
    assert parse_exposition("#\n" * 10_000, max_samples=1000, max_lines=4000).over_limit == "lines"
    assert time.perf_counter() - t0 < 1.0  # bounded by the limits, not by 2 M lines
    assert parse_exposition("a 1\nb 2\n", max_samples=2).over_limit is None


def sample(**values) -> EngineSample:
    return EngineSample("m", values.pop("instance", "0"), **values)


def test_impossible_values_are_dropped_and_rounding_is_clamped():
    bad = sample(kv_usage_ratio=7.5, requests_running=-3, requests_waiting=2, kv_capacity_blocks=0)
    rounded = sample(instance="1", kv_usage_ratio=1 + 1e-12, requests_running=-1e-12)
    dropped, notes = drop_impossible([bad, rounded])
    assert dropped == 3
    assert (bad.kv_usage_ratio, bad.requests_running, bad.kv_capacity_blocks) == (None, None, None)
    assert bad.requests_waiting == 2
    assert rounded.kv_usage_ratio == 1.0 and rounded.requests_running == 0.0
    assert any("kv_usage_ratio" in n and "7.5" in n and "'0'" in n for n in notes)


def test_hits_above_queries_memory_utilisation_and_broken_histograms():
    s = sample(prefix_cache_queries_tokens=100.0, prefix_cache_hits_tokens=150.0, gpu_memory_utilization=1.5)
    s.histograms = {
        "time_to_first_token_seconds": HistogramSample((0.1, math.inf), (5.0, 3.0), 1.0, 3.0),  # decreasing
        "e2e_request_latency_seconds": HistogramSample((0.1, math.inf), (1.0, 2.0), 0.5, 2.0),
        "request_queue_time_seconds": HistogramSample((0.1, math.inf), (1.0, 2.0), -4.0, 2.0),  # sum < 0
    }
    dropped, _ = drop_impossible([s])
    assert dropped == 4
    assert s.prefix_cache_hits_tokens is None and s.prefix_cache_queries_tokens == 100.0
    assert s.gpu_memory_utilization is None
    assert set(s.histograms) == {"e2e_request_latency_seconds"}


def test_normalise_drops_before_aggregating():
    text = (
        'vllm:num_requests_running{engine="0",model_name="m"} -5\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 3\n'
    )
    norm = normalise(parse_exposition(text))
    assert norm.impossible == 1
    (agg,) = norm.aggregates
    assert agg.requests_running == 3  # the impossible -5 is not summed in


@pytest.mark.parametrize(
    "url,shown",
    [
        ("http://alice:pw@h:1/metrics", "http://alice:xxxxx@h:1/metrics"),
        ("https://h/metrics", "https://h/metrics"),
        ("http://bob@h/m", "http://bob@h/m"),
        ("http://:only-pw@h/m", "http://:xxxxx@h/m"),
        ("http://u:p%40ss@h/m?x=1", "http://u:xxxxx@h/m?x=1"),
    ],
)
def test_redact_url(url, shown):
    assert redact_url(url) == shown


def test_userinfo_becomes_credentials_and_leaves_the_url():
    url, creds = split_userinfo("http://u:p%40ss@h:9/metrics")
    assert url == "http://h:9/metrics"
    assert creds is not None and creds.header() == "Basic dTpwQHNz"  # base64("u:p@ss")
    assert "p@ss" not in repr(creds) and "p@ss" not in creds.describe()


@pytest.mark.parametrize(
    "spec,message",
    [
        ("t=bearer:/x", "KIND one of"),
        ("bearer-file:/x", "NAME=KIND:WHERE"),
        ("t=bearer-file:/nonexistent/token", "/nonexistent/token"),
        ("t=basic-env:KVSCOPE_TEST_UNSET_VAR", "KVSCOPE_TEST_UNSET_VAR is not set"),
    ],
)
def test_bad_auth_specs_are_refused_clearly(spec, message):
    with pytest.raises(CredentialError, match=message):
        parse_auth(spec)


def test_basic_auth_secret_needs_a_user_and_a_password(tmp_path):
    (tmp_path / "basic").write_text("just-a-password\n")
    with pytest.raises(CredentialError, match="user:password"):
        parse_auth(f"t=basic-file:{tmp_path / 'basic'}")


@pytest.mark.parametrize(
    "policy,to,refused",
    [
        ("same-origin", "http://h:80/other", False),  # the default port, written out
        ("same-origin", "https://h/metrics", True),
        ("same-origin", "http://h:81/metrics", True),
        ("same-origin", "http://evil/metrics", True),
        ("none", "http://h/metrics2", True),
        ("any", "http://evil/metrics", False),
        ("any", "file:///etc/passwd", True),
    ],
)
def test_redirect_policy(policy, to, refused):
    assert (refusal(policy, "http://h/metrics", to) is not None) is refused


def test_a_location_is_resolved_without_its_userinfo():
    assert resolve("http://h/a/metrics", "../b") == "http://h/b"
    assert resolve("http://h/metrics", "http://u:pw@g:1/x#frag") == "http://g:1/x"


def run_exporter(*args: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_start_up_never_shows_a_password_and_warns_about_it():
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "--listen",
            f"127.0.0.1:{port}",
            "--target",
            "a=http://alice:hunter2@127.0.0.1:9/metrics",
        ],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any("scraping" in ln for ln in lines):
            lines.append(proc.stderr.readline())
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=20)[1]
    out = "".join(lines) + rest
    assert "scraping a=http://127.0.0.1:9/metrics (basic auth for user 'alice'" in out, out
    assert "hunter2" not in out and "visible to other local users" in out


def test_target_auth_for_an_unknown_target_and_a_bad_spec_exit_2(tmp_path):
    (tmp_path / "t").write_text("tok")
    unknown = run_exporter(
        "--target", "a=http://127.0.0.1:9", "--target-auth", f"b=bearer-file:{tmp_path / 't'}"
    )
    assert unknown.returncode == 2 and "no target is named 'b'" in unknown.stderr
    bad = run_exporter("--target", "a=http://127.0.0.1:9", "--target-auth", "a=token:xyz")
    assert bad.returncode == 2 and "KIND one of" in bad.stderr
    error = run_exporter("--target", "ftp://u:hunter2@h/x")
    assert error.returncode == 2 and "hunter2" not in error.stderr and "xxxxx" in error.stderr
