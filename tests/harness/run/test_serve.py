"""`--serve CMD`: the command split as a shell would, the engine recognised, the port found (the
command's --port, --target's, the engine's default) and secrets kept out of run.json."""

from __future__ import annotations

import pytest

from harness.run.config import ConfigError, serve_command
from harness.run.serve import parse_serve, port_taken, recognise
from tests.support.prometheus import free_port

VLLM = "python -m vllm.entrypoints.openai.api_server --model /m --host 0.0.0.0 --port 8011"


def test_the_command_names_its_engine() -> None:
    assert recognise(VLLM.split()) == "vllm"
    assert recognise(["vllm", "serve", "m"]) == "vllm"
    assert recognise(["/opt/llama.cpp/llama-server", "-m", "x.gguf"]) == "llamacpp"
    assert recognise(["python", "-m", "harness.cli", "engine", "serve", "--num-blocks", "8"]) == "bundled"
    assert recognise(["kvscope", "engine", "serve"]) == "bundled"
    assert recognise(["python", "-m", "sglang.launch_server"]) == "other"


def test_the_port_comes_from_the_command_then_target_then_the_engines_default() -> None:
    s = parse_serve(VLLM)
    assert (s.engine, s.host, s.port, s.port_source, s.url) == (
        "vllm",
        "127.0.0.1",  # 0.0.0.0 is reached on loopback
        8011,
        "--port",
        "http://127.0.0.1:8011",
    )
    assert parse_serve("my-server --flag", "http://127.0.0.1:9123").port == 9123
    assert parse_serve("vllm serve m").port_source == "default" and parse_serve("vllm serve m").port == 8000
    assert parse_serve("llama-server -m x.gguf").port == 8080
    assert parse_serve("my-server --port=9001").port == 9001
    with pytest.raises(ValueError, match="cannot tell the server's port"):
        parse_serve("my-server --flag")
    with pytest.raises(ValueError, match="listens on port 8011 but --target says"):
        parse_serve(VLLM, "http://127.0.0.1:9000")
    with pytest.raises(ValueError, match="not a number"):
        parse_serve("vllm serve m --port x")
    with pytest.raises(ValueError, match="needs a command"):
        parse_serve("A=1 B=2")


def test_leading_assignments_are_the_servers_environment_and_secrets_stay_out_of_run_json() -> None:
    s = parse_serve("VLLM_CPU_KVCACHE_SPACE=1 HF_TOKEN=hf_abc " + VLLM)
    assert s.env == {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_TOKEN": "hf_abc"}
    assert s.environment()["HF_TOKEN"] == "hf_abc"
    recorded = s.to_json()
    assert recorded["env"] == {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_TOKEN": "<redacted>"}
    assert "hf_abc" not in recorded["command"] and recorded["argv"][0] == "python"


def test_engine_flags_do_not_mix_with_serve() -> None:
    with pytest.raises(ConfigError, match="put them in the command"):
        serve_command(VLLM, None, ["--num-blocks", "8"])
    with pytest.raises(ConfigError, match="cannot split"):
        serve_command("vllm 'unclosed", None, [])
    assert serve_command(None, None, []) is None


def test_a_port_in_use_is_seen() -> None:
    import socket

    port = free_port()
    assert not port_taken("127.0.0.1", port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert port_taken("127.0.0.1", port)
