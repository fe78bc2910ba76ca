"""Each verdict's change as the engine's own flags, and what cannot be applied by restarting
the server says why."""

from __future__ import annotations

import pytest

from harness.verify.changes import FlagChange, NotApplicable, flag_change, with_flags

POOL = {"label": "add memory: a KV pool of 95 blocks", "num_blocks": 95, "replicas": 1}
FP8 = {"label": "kv_cache_dtype=fp8", "kv_cache_dtype": "fp8", "num_blocks": 127, "replicas": 1}
CUT = {"label": "max_model_len=512", "max_model_len": 512}


@pytest.mark.parametrize(
    "engine, change, words",
    [
        ("vllm", POOL, ["--num-gpu-blocks-override", "95"]),
        ("bundled", POOL, ["--num-blocks", "95"]),
        ("llamacpp", POOL, ["-c", str(94 * 16)]),
        ("vllm", FP8, ["--kv-cache-dtype", "fp8", "--num-gpu-blocks-override", "127"]),
        ("bundled", FP8, ["--kv-cache-dtype", "fp8", "--num-blocks", "127"]),
        ("llamacpp", FP8, ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0", "-c", str(126 * 16)]),
        ("vllm", CUT, ["--max-model-len", "512"]),
        ("bundled", CUT, ["--max-model-len", "512"]),
        ("llamacpp", CUT, ["-np", "8"]),  # -c 4096 over 512-token slots
    ],
)
def test_each_engine_gets_its_own_flags(engine, change, words) -> None:
    got = flag_change("x", change, engine, 16, {"-c": "4096"})
    assert isinstance(got, FlagChange) and got.words() == words


@pytest.mark.parametrize(
    "action, change, code",
    [
        ("add_memory", {"gpu": "h200", "num_blocks": 9000}, "verify_other_hardware"),
        ("add_memory", {"num_blocks": 100, "replicas": 3}, "verify_other_hardware"),
        ("make_prefix_identical", {"prefix_identical": True}, "verify_not_a_server_change"),
        ("route_by_prefix", {}, "verify_not_a_server_change"),
        ("raise_memory_utilization", {"gpu_memory_utilization": 0.9}, "verify_no_gpu"),
        ("add_memory", {}, "verify_nothing_to_apply"),
    ],
)
def test_what_a_restart_cannot_apply_says_why(action, change, code) -> None:
    got = flag_change(action, change, "vllm", 16, {})
    assert isinstance(got, NotApplicable) and got.code == code and got.reason.text


def test_an_unknown_server_or_a_missing_llamacpp_context_is_not_applicable() -> None:
    assert flag_change("add_memory", POOL, "other", 16, {}).code == "verify_unknown_engine"  # type: ignore[union-attr]
    assert flag_change("cut_context", CUT, "llamacpp", 16, {}).code == "verify_flag_unknown"  # type: ignore[union-attr]


def test_flags_replace_their_earlier_values_in_either_spelling() -> None:
    change = FlagChange((("--num-gpu-blocks-override", "20"), ("--enforce-eager", None)))
    argv = [
        "vllm",
        "serve",
        "m",
        "--num-gpu-blocks-override",
        "10",
        "--port",
        "8000",
        "--num-gpu-blocks-override=12",
    ]
    assert with_flags(argv, change) == [
        "vllm", "serve", "m", "--port", "8000", "--num-gpu-blocks-override", "20", "--enforce-eager",
    ]  # fmt: skip
    assert with_flags(
        ["--num-blocks", "64", "--kv-cache-dtype", "auto"], FlagChange((("--num-blocks", "95"),))
    ) == [
        "--kv-cache-dtype",
        "auto",
        "--num-blocks",
        "95",
    ]


def test_a_verdict_that_was_not_replayed_still_names_its_change() -> None:
    from harness.verify.loop import change_of

    replayed = {"action": "add_memory", "replay": {"change": POOL}, "projected": {"pool_blocks": 95}}
    assert change_of(replayed) == POOL
    fp8 = {
        "action": "quantize_kv_cache",
        "title": "Quantize",
        "replay": None,
        "projected": {"pool_blocks": 127},
    }
    assert change_of(fp8) == {"label": "Quantize", "kv_cache_dtype": "fp8", "num_blocks": 127}
    cut = {"action": "cut_context", "title": "Cut", "projected": {"max_model_len": 512}}
    assert flag_change("cut_context", change_of(cut), "vllm", 16, {}).words() == ["--max-model-len", "512"]  # type: ignore[union-attr]
