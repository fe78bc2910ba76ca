"""`kvscope run`'s configuration: defaults and the checks that fail before anything starts."""

from __future__ import annotations

import pytest


def test_run_config_validation(tmp_path) -> None:
    from harness.cli import build_parser
    from harness.run.config import ConfigError, from_args

    parse = build_parser().parse_args
    cfg = from_args(
        parse(
            [
                "run",
                "--workload",
                "shared_prefix",
                "--prefix-tokens",
                "64",
                "--num-blocks",
                "32",
                "--out",
                str(tmp_path),
            ]
        )
    )
    assert cfg.model is None and cfg.users == 8 and not cfg.open_loop
    assert cfg.engine_argv == ["--num-blocks", "32"] and "--prefix-tokens" in cfg.workload_argv
    rate = from_args(parse(["run", "--workload", "rate", "--target", "http://h:1"]))
    assert rate.open_loop and rate.users == 64 and rate.workload_argv[-2:] == ["--rate", "2.0"]
    for argv, match in (
        (["--workload", "chat", "--prefix-tokens", "5"], "has no option"),
        (["--workload", "replay"], "needs --trace"),
        (["--workload", "chat", "--target", "http://h:1", "--num-blocks", "8"], "bundled engine"),
        (["--workload", "chat", "--duration", "soon"], "duration"),
    ):
        with pytest.raises(ConfigError, match=match):
            from_args(parse(["run", *argv]))
