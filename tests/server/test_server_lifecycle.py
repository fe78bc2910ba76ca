"""Refusals in OpenAI's error format (401, 404, 400, 503), and the process lifecycle: the
server started as a subprocess, SIGTERM stops admission, lets in-flight requests finish (or
aborts them after the grace period) and exits 0; the API key never reaches the log; an engine
core process that dies makes the server answer 503 and exit non-zero."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from reference_engine.config import EngineConfig
from reference_engine.core.client import ThreadCoreClient
from reference_engine.core.launch import CoreLaunch, ready_of
from reference_engine.server.app import create_app
from reference_engine.server.background import BackgroundServer, serve_in_background
from reference_engine.server.state import ServerConfig
from tests.support.paths import ROOT
from tests.support.wait import wait_until

KEY = "sk-test-4f1c9a7e-very-secret"
MODEL = "tiny"


def json_headers(key: str | None) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        **({"Authorization": f"Bearer {key}"} if key is not None else {}),
    }


def request(
    port: int,
    method: str,
    path: str,
    body: dict | bytes | None = None,
    key: str | None = None,
    timeout: float = 120,
) -> tuple[int, bytes, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    try:
        conn.request(method, path, body=data, headers=json_headers(key))
        response = conn.getresponse()
        return response.status, response.read(), dict(response.getheaders())
    finally:
        conn.close()


def error_of(payload: bytes) -> dict:
    error = json.loads(payload)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


@pytest.fixture(scope="module")
def keyed():
    launch = CoreLaunch(EngineConfig(model="tiny-random", num_blocks=128, max_model_len=64))
    with serve_in_background(launch, MODEL, api_key=KEY) as server:
        yield server


def test_401_without_or_with_a_wrong_key(keyed):
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    for key in (None, "wrong", KEY + "x", ""):
        status, payload, headers = request(keyed.port, "POST", "/v1/completions", body, key)
        assert status == 401 and error_of(payload)["code"] == "invalid_api_key"
        assert KEY.encode() not in payload
    assert request(keyed.port, "GET", "/v1/models")[0] == 401
    assert request(keyed.port, "POST", "/v1/completions", body, KEY)[0] == 200
    # Health checks and scrapes need no key, as in vLLM.
    assert request(keyed.port, "GET", "/health")[0] == 200
    assert request(keyed.port, "GET", "/metrics")[0] == 200


def test_openai_client_with_the_key(keyed):
    client = openai.OpenAI(base_url=keyed.url + "/v1", api_key=KEY, max_retries=0)
    assert client.models.list().data[0].id == MODEL
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed.url + "/v1", api_key="nope", max_retries=0).models.list()


def test_404_for_an_unknown_model_or_route(keyed):
    status, payload, _ = request(
        keyed.port, "POST", "/v1/completions", {"model": "gpt-9", "prompt": "x"}, KEY
    )
    assert (
        status == 404
        and error_of(payload)["code"] == "model_not_found"
        and error_of(payload)["param"] == "model"
    )
    status, payload, _ = request(keyed.port, "GET", "/v1/nothing-here", None, KEY)
    assert status == 404 and error_of(payload)["type"] == "invalid_request_error"
    client = openai.OpenAI(base_url=keyed.url + "/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "x"}])


def test_400s(keyed):
    cases = [
        (b"{not json", None),
        ({"model": MODEL, "prompt": "x" * 64}, "prompt"),  # 64 tokens leave no room in max_model_len 64
        ({"model": MODEL, "prompt": "x" * 10, "max_tokens": 60}, "max_tokens"),
        ({"model": MODEL, "prompt": "x", "temperature": -1}, "temperature"),
        ({"model": MODEL, "prompt": "x", "max_tokens": "5"}, "max_tokens"),
        ({"model": MODEL, "prompt": "x", "n": True}, "n"),
        ({"model": MODEL, "prompt": ["a", "b"]}, "prompt"),
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs"),
        ({"model": MODEL, "prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ]
    for body, param in cases:
        path = "/v1/chat/completions" if isinstance(body, dict) and "messages" in body else "/v1/completions"
        status, payload, _ = request(keyed.port, "POST", path, body, KEY)
        assert status == 400, (body, payload)
        error = error_of(payload)
        assert error["type"] == "invalid_request_error" and error["param"] == param, (body, error)
    status, payload, _ = request(
        keyed.port, "POST", "/v1/completions", {"model": MODEL, "prompt": "x" * 64}, KEY
    )
    assert error_of(payload)["code"] == "context_length_exceeded"


def test_503_while_draining(keyed):
    keyed.state.draining = True
    try:
        status, payload, _ = request(
            keyed.port, "POST", "/v1/completions", {"model": MODEL, "prompt": "x"}, KEY
        )
        assert status == 503 and error_of(payload)["code"] == "shutting_down"
        assert request(keyed.port, "GET", "/health")[0] == 503
    finally:
        keyed.state.draining = False


# -- the process ------------------------------------------------------------------------------


class ServerProcess:
    """`python -m reference_engine.server.serve_cli ...` on a free port; stderr is kept."""

    def __init__(self, *args: str, env: dict | None = None):
        cmd = [sys.executable, "-m", "reference_engine.server.serve_cli", "--port", "0", *args]
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
            cwd=ROOT,
            start_new_session=True,  # its own process group, as a terminal's job is
        )
        self.stderr: list[str] = []
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()
        line = self.proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in line, (line, self.stderr)
        self.port = int(line.rsplit(":", 1)[1])

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)


def stream_body(max_tokens: int) -> dict:
    return {
        "model": MODEL,
        "prompt": "Keep going",
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,
    }


def stream_in_background(port: int, body: dict, key: str | None = None) -> tuple[threading.Thread, list[str]]:
    """Starts a streaming request and returns once its first token has arrived, so the request
    is known to be in flight (a fixed sleep is too short on a slow machine, too long on a fast one)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/v1/completions", body=json.dumps(body).encode(), headers=json_headers(key))
    response = conn.getresponse()
    assert response.status == 200
    events: list[str] = []
    while not events:
        raw = response.readline()
        assert raw, "the stream ended before its first event"
        if raw.startswith(b"data: "):
            events.append(raw.decode().strip()[6:])

    def read_rest():
        try:
            events.extend(line.decode().strip()[6:] for line in response if line.startswith(b"data: "))
        finally:
            conn.close()

    thread = threading.Thread(target=read_rest)
    thread.start()
    return thread, events


def test_sigterm_finishes_in_flight_requests_and_exits_0(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")
    server = ServerProcess(
        "--model",
        "tiny-random",
        "--served-model-name",
        MODEL,
        "--num-blocks",
        "128",
        "--api-key-file",
        str(key_file),
        "--access-log",
        "--log-level",
        "debug",
        "--shutdown-grace",
        "300",
    )
    thread, events = stream_in_background(server.port, stream_body(800), KEY)
    server.proc.send_signal(signal.SIGTERM)
    wait_until(
        lambda: request(server.port, "GET", "/health")[0],
        "/health to answer 503 (draining)",
        ok=lambda s: s == 503,
    )
    status, payload, _ = request(server.port, "POST", "/v1/completions", {"model": MODEL, "prompt": "x"}, KEY)
    assert status == 503 and error_of(payload)["code"] == "shutting_down"
    thread.join(60)
    assert server.wait() == 0
    assert events[-1] == "[DONE]"
    final = json.loads(events[-2])
    assert final["choices"][0]["finish_reason"] == "length" and "kvscope" in final  # finished, not cut off
    assert KEY not in "".join(server.stderr)
    assert "POST /v1/completions" in "".join(server.stderr)  # the access log ran, without the key


def test_sigterm_aborts_what_outlives_the_grace_period():
    server = ServerProcess(
        "--model",
        "tiny-random",
        "--served-model-name",
        MODEL,
        "--num-blocks",
        "256",
        "--shutdown-grace",
        "0.3",
    )
    thread, events = stream_in_background(server.port, stream_body(3000))
    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    thread.join(60)
    assert server.wait() == 0 and time.monotonic() - started < 20
    assert events[-1] == "[DONE]"
    final = json.loads(events[-2])
    assert final["choices"][0]["finish_reason"] == "abort" and final["kvscope"]["e2e_s"] > 0


def test_ctrl_c_to_the_whole_process_group_still_drains():
    """A terminal's Ctrl-C (or a service manager's stop) signals every process of the group, the
    engine core included. The core ignores it and keeps serving until the server has let the
    in-flight request finish."""
    server = ServerProcess(
        "--model",
        "tiny-random",
        "--served-model-name",
        MODEL,
        "--num-blocks",
        "128",
        "--shutdown-grace",
        "300",
    )
    thread, events = stream_in_background(server.port, stream_body(300))
    os.killpg(server.proc.pid, signal.SIGINT)
    thread.join(60)
    assert server.wait() == 0
    final = json.loads(events[-2])
    assert (
        final["choices"][0]["finish_reason"] == "length" and final["usage" if "usage" in final else "kvscope"]
    )


def test_bad_configuration_exits_2_with_a_message():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "reference_engine.server.serve_cli",
            "--simulate",
            "--sim-model",
            "llama-3.1-70b",
            "--sim-gpu",
            "h100-80gb",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert (
        "error:" in proc.stderr and "tensor_parallel_size" in proc.stderr
    )  # 141 GB of weights on one 80 GB GPU


class ExplodingExecutor:
    def execute(self, out):
        raise RuntimeError("simulated device failure")


def test_an_engine_failure_is_a_500_and_unhealthy(caplog):
    """A step that raises leaves the engine in an unknown state: the in-flight request gets a
    500, later ones too, and /health says so (a supervisor should restart the server)."""
    from tests.engine.fakes import make_engine

    engine = make_engine(detokenize=False)
    engine.executor = ExplodingExecutor()
    client = ThreadCoreClient(engine, ready_of(engine, MODEL, "fake"))
    app = create_app(client, engine.tokenizer, ServerConfig(MODEL))
    with BackgroundServer(app) as server:
        for _ in range(2):
            status, payload, _ = request(
                server.port, "POST", "/v1/completions", {"prompt": "abc", "max_tokens": 2}
            )
            assert status == 500 and error_of(payload)["code"] == "engine_failed"
        assert request(server.port, "GET", "/health")[0] == 500
    assert "simulated device failure" in caplog.text


def requests_running(port: int) -> float:
    """The server's vllm:num_requests_running (requests in the core's batches)."""
    status, payload, _ = request(port, "GET", "/metrics")
    assert status == 200, payload
    families = text_string_to_metric_families(payload.decode())
    return sum(s.value for f in families for s in f.samples if s.name == "vllm:num_requests_running")


def core_pid(server_pid: int) -> int:
    """The engine core: the server process's only child."""
    with open(f"/proc/{server_pid}/task/{server_pid}/children") as f:
        (pid,) = f.read().split()
    return int(pid)


def test_a_dead_engine_core_means_503_and_a_non_zero_exit():
    """SIGKILL the core process mid-request: the waiting request is answered 503 at once, and
    the server stops with status 1 instead of hanging or pretending to be healthy."""
    server = ServerProcess("--model", "tiny-random", "--served-model-name", MODEL, "--num-blocks", "256")
    result: dict = {}

    def long_request():
        body = {"model": MODEL, "prompt": "x", "max_tokens": 3000, "ignore_eos": True}
        result["response"] = request(server.port, "POST", "/v1/completions", body)

    thread = threading.Thread(target=long_request)
    thread.start()
    wait_until(lambda: requests_running(server.port), "the request running in the core", ok=lambda n: n >= 1)
    os.kill(core_pid(server.proc.pid), signal.SIGKILL)
    thread.join(30)
    status, payload, _ = result["response"]
    assert status == 503 and error_of(payload)["code"] == "engine_dead"
    assert server.wait(30) == 1
    assert "engine core process exited unexpectedly" in "".join(server.stderr)
