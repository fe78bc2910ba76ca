"""A rerun repeats the recorded run: its command line, parsed by `kvscope run` itself, gives the
same configuration (workload, users, duration, seed, workload options), with the change applied
to the engine's flags or to the --serve command, and only the output folder new."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from harness.cli.kvscope import build_parser
from harness.run.config import from_args
from harness.verify.changes import FlagChange
from harness.verify.rerun import NotRerunnable, rerun_argv

SAME = ("workload", "users", "spawn_rate", "rate", "duration_s", "seed", "warmup_s", "model")


def _same(a, b) -> None:
    assert {k: getattr(a, k) for k in SAME} == {k: getattr(b, k) for k in SAME}
    assert sorted(a.workload_argv) == sorted(b.workload_argv)  # the seed is given explicitly now


def _config(argv: list[str]):
    return from_args(build_parser().parse_args(["run", *argv]))


def _recorded(cfg) -> dict:
    return {"config": cfg.to_dict(), "bundled_engine": cfg.target is None, "target": cfg.target}


def _again(run: dict, out: Path, change: FlagChange | None):
    argv = rerun_argv(run, out, change)
    assert argv[argv.index("harness.cli") + 1] == "run"
    return _config(argv[argv.index("harness.cli") + 2 :])


def test_the_bundled_engine_run_is_repeated_with_the_changed_pool(tmp_path: Path) -> None:
    cfg = _config(
        "--workload shared_prefix --model smollm2-135m --num-blocks 64 --users 6 --duration 75s "
        "--num-prefixes 4 --prefix-tokens 192 --suffix-tokens 32 --output-tokens 48 --drain-timeout 60 "
        f"--warmup 5s --out {tmp_path / 'a'}".split()
    )
    again = _again(_recorded(cfg), tmp_path / "b", FlagChange((("--num-blocks", "95"),)))
    _same(again, cfg)
    assert again.engine_argv == ["--num-blocks", "95"] and again.out == tmp_path / "b"
    assert again.drain_timeout_s == 60.0 and not again.advise  # a rerun measures; it does not advise
    unchanged = _again(_recorded(cfg), tmp_path / "c", None)
    assert unchanged.engine_argv == ["--num-blocks", "64"] and unchanged.seed == cfg.seed


def test_a_served_run_is_repeated_with_the_change_in_its_command(tmp_path: Path) -> None:
    serve = "VLLM_CPU_KVCACHE_SPACE=1 vllm serve /m --port 18001 --num-gpu-blocks-override 10"
    cfg = _config(["--serve", serve, "--workload", "chat", "--users", "4", "--duration", "30s", "--otlp",
                   "--out", str(tmp_path / "a")])  # fmt: skip
    again = _again(_recorded(cfg), tmp_path / "b", FlagChange((("--num-gpu-blocks-override", "20"),)))
    _same(again, cfg)
    assert again.serve is not None and again.serve.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert shlex.join(again.serve.argv) == "vllm serve /m --port 18001 --num-gpu-blocks-override 20"
    assert again.otlp == cfg.otlp and again.target == "http://127.0.0.1:18001"


def test_a_target_kvscope_did_not_start_cannot_be_rerun(tmp_path: Path) -> None:
    cfg = _config(["--target", "http://127.0.0.1:9", "--workload", "chat", "--out", str(tmp_path / "a")])
    with pytest.raises(NotRerunnable, match="--serve"):
        rerun_argv(_recorded(cfg), tmp_path / "b", None)
    with pytest.raises(NotRerunnable, match="no configuration"):
        rerun_argv({}, tmp_path / "b", None)
