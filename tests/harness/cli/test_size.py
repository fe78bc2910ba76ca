"""`kvscope size` through the real entry point: the human table, --json, and error exits."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.cli.size import parse_bytes


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["size", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_human_table_shows_the_worked_arithmetic(capsys):
    rc, out, err = run(
        capsys,
        "--model",
        "llama-3.1-70b",
        "--gpu",
        "h100-80gb",
        "--tp",
        "2",
        "--max-model-len",
        "32768",
        "--context-tokens",
        "3000",
        "--concurrency",
        "8",
        "--shared-prefix-tokens",
        "1000",
        "--sharing-requests",
        "8",
    )
    assert rc == 0 and err == ""
    for needle in (
        "2 (K,V) x 80 layers x 8 KV heads x 128 head_dim x 2 B",
        "327,680 B",
        "163,840 B",
        "x 0.9 utilisation",
        "- weights",
        "= KV budget",
        "blocks =",
        "reserved up front for 32,768 tokens",
        "idle share of the reservation",
        "90.8%",
        "ceil(3,000 / 16)",
        "= 188",
        "8 / 15 tokens",
        "contiguous:",
        "paged:",
        "Maximum concurrency for 32,768 tokens",
        "target of 8 concurrent requests",
        "Shared prefix: 1,000 tokens x 8 requests",
        "floor(1,000 / 16) = 62 full blocks",
        "saved (434 blocks)",
    ):
        assert needle in out, needle


def test_json_parses_and_matches_the_arithmetic(capsys):
    rc, out, _ = run(
        capsys,
        "--model",
        "qwen3-4b",
        "--gpu",
        "l4",
        "--kv-budget",
        "11.47GiB",
        "--max-model-len",
        "32768",
        "--json",
    )
    assert rc == 0
    data = json.loads(out)
    assert data["kv_bytes_per_token"] == 147_456 and data["budget_given"] is True
    assert data["token_capacity"] == pytest.approx(83_488, rel=0.001)  # vLLM's logged figure
    assert data["prefix"] is None and data["attention"] == "full"
    rc, out, _ = run(
        capsys,
        "--model",
        "qwen3-4b",
        "--gpu",
        "l4",
        "--kv-budget",
        "11.47GiB",
        "--max-model-len",
        "32768",
        "--kv-cache-dtype",
        "fp8",
        "--shared-prefix-tokens",
        "512",
        "--sharing-requests",
        "4",
        "--json",
    )
    data = json.loads(out)
    assert data["token_capacity"] == pytest.approx(166_992, rel=0.001)
    assert data["prefix"]["blocks_saved"] == 3 * 32 and data["prefix"]["bytes_saved"] == 3 * 512 * 73_728


def test_mla_and_sliding_models_explain_their_formula(capsys):
    _, out, _ = run(capsys, "--model", "deepseek-v3", "--gpu", "h200-141gb", "--tp", "8")
    assert (
        "61 layers x (512 latent + 64 rope) x 2 B" in out
        and "70,272 B" in out
        and "MLA latent kept whole" in out
    )
    _, out, _ = run(capsys, "--model", "gpt-oss-120b", "--gpu", "h100-80gb", "--context-tokens", "8000")
    assert "18 of 36 layers slide over 128 tokens" in out


def test_a_config_json_path_works_as_the_model(capsys, tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "num_hidden_layers": 4,
                "hidden_size": 256,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "intermediate_size": 512,
                "vocab_size": 1000,
                "max_position_embeddings": 4096,
            }
        )
    )
    rc, out, _ = run(capsys, "--model", str(tmp_path / "config.json"), "--gpu", "l4", "--json")
    assert rc == 0 and json.loads(out)["kv_bytes_per_token"] == 2 * 4 * 2 * 64 * 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "llama-9", "--gpu", "h100-80gb"], "unknown model 'llama-9'; known: llama-3.1-8b"),
        (["--model", "qwen3-4b", "--gpu", "h1000"], "unknown GPU 'h1000'; known: a10g"),
        (
            ["--model", "qwen3-4b", "--gpu", "l4", "--gpu-memory-utilization", "1.5"],
            "utilisation must be in (0, 1]",
        ),
        (
            ["--model", "qwen3-4b", "--gpu", "l4", "--gpu-memory-utilization", "0"],
            "utilisation must be in (0, 1]",
        ),
        (["--model", "llama-3.1-70b", "--gpu", "h100-80gb"], "larger than one h100-80gb"),
        (["--model", "llama-3.1-405b", "--gpu", "a10g", "--tp", "8"], "larger than one a10g"),
        (["--model", "smollm2-135m", "--gpu", "l4", "--tp", "2"], "9 attention heads"),
        (["--model", "qwen3-4b", "--gpu", "l4", "--kv-cache-dtype", "fp4"], "unknown KV cache dtype"),
        (["--model", "qwen3-4b", "--gpu", "l4", "--context-tokens", "50000"], "exceed max model len"),
    ],
)
def test_errors_exit_2_with_a_message_and_no_traceback(capsys, argv, message):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.startswith("kvscope size: error: ") and message in err and "Traceback" not in err


def test_malformed_config_json_exits_2(capsys, tmp_path):
    (tmp_path / "config.json").write_text("{broken")
    rc, _, err = run(capsys, "--model", str(tmp_path / "config.json"), "--gpu", "l4")
    assert rc == 2 and "not valid JSON" in err and "Traceback" not in err


def test_bad_flag_values_are_argparse_errors(capsys):
    with pytest.raises(SystemExit) as info:
        main(["size", "--model", "qwen3-4b", "--gpu", "l4", "--kv-budget", "lots"])
    assert info.value.code == 2 and "not a size" in capsys.readouterr().err


def test_parse_bytes():
    assert parse_bytes("1073741824") == parse_bytes("1GiB") == parse_bytes("1 gib") == 1 << 30
    assert parse_bytes("40GB") == 40 * 10**9 and parse_bytes("11.47GiB") == round(11.47 * (1 << 30))
