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
    assert rate.open_loop and rate.users == 64 and "--rate" in rate.workload_argv
    assert rate.workload_argv[rate.workload_argv.index("--rate") + 1] == "2.0"
    for argv, match in (
        (["--workload", "chat", "--prefix-tokens", "5"], "has no option"),
        (["--workload", "replay"], "needs --trace"),
        (["--workload", "chat", "--target", "http://h:1", "--num-blocks", "8"], "bundled engine"),
        (["--workload", "chat", "--duration", "soon"], "duration"),
        (["--workload", "chat", "--max-error-rate", "5 percent"], "not a share"),
        (["--workload", "chat", "--max-error-rate", "150%"], "between 0 and 1"),
        (["--workload", "rate", "--length-spread", "1.5"], "length-spread"),
        (["--workload", "chat", "--warmup", "later"], "warmup"),
        (["--workload", "chat", "--api-key", "k", "--api-key-file", "f"], "not both"),
        (["--workload", "chat", "--api-key-file", "/nonexistent/key"], "--api-key-file: cannot read"),
        (["--workload", "chat", "--api-key-file", "/dev/null"], "--api-key-file: /dev/null is empty"),
    ):
        with pytest.raises(ConfigError, match=match):
            from_args(parse(["run", *argv]))


def test_each_run_draws_its_seed_and_given_flags_are_kept(tmp_path) -> None:
    from harness.cli import build_parser
    from harness.run.config import from_args

    parse = build_parser().parse_args
    a, b = (from_args(parse(["run", "--workload", "chat", "--out", str(tmp_path / x)])) for x in "ab")
    assert a.seed != b.seed  # 1 in 2^31 to collide
    assert a.workload_argv[a.workload_argv.index("--seed") + 1] == str(a.seed)
    c = from_args(parse(["run", "--workload", "chat", "--seed", "7", "--warmup", "10s", "--users", "20"]))
    assert c.seed == 7 and c.workload_argv.count("--seed") == 1 and c.warmup_s == 10.0
    assert c.spawn_rate == 2.0  # closed loop: 20 users staggered over the 10 s warm-up
    d = from_args(parse(["run", "--workload", "chat", "--duration", "60s", "--users", "12"]))
    assert d.spawn_rate == 2.0  # no warm-up: over a tenth of the run
    open_loop = from_args(parse(["run", "--workload", "rate", "--users", "30"]))
    assert open_loop.spawn_rate == 30.0  # slots, all at once
    assert from_args(parse(["run", "--workload", "chat", "--max-error-rate", "5%"])).max_error_rate == 0.05
    assert from_args(parse(["run", "--workload", "chat", "--max-error-rate", "0"])).max_error_rate == 0.0


def test_the_api_key_is_on_no_command_line(tmp_path, monkeypatch) -> None:
    from pathlib import Path

    from harness.cli import build_parser
    from harness.run.commands import child_env, engine_command, master_command, worker_command
    from harness.run.config import from_args
    from harness.workload.options import API_KEY_ENV

    parse = build_parser().parse_args
    key_file = tmp_path / "key"
    key_file.write_text("s3cret-from-file\n")
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    for i, (given, key) in enumerate(
        (
            (["--api-key", "s3cret-flag"], "s3cret-flag"),
            (["--api-key-file", str(key_file)], "s3cret-from-file"),
        )
    ):
        cfg = from_args(parse(["run", "--workload", "chat", "--out", str(tmp_path / str(i)), *given]))
        assert cfg.api_key == key and key not in " ".join(cfg.workload_argv)
        argvs = (
            engine_command(cfg.model, cfg.engine_argv, 1),
            master_command(cfg, "http://127.0.0.1:1", 2, Path("r"), Path("s"), Path("c")),
            worker_command(cfg.workload, cfg.master_host, 2),
        )
        assert not any(key in " ".join(argv) for argv in argvs)
        assert child_env(key)[API_KEY_ENV] == key and key not in str(cfg.to_dict())
    monkeypatch.setenv(API_KEY_ENV, "from-env")
    assert from_args(parse(["run", "--workload", "chat", "--out", str(tmp_path / "e")])).api_key == "from-env"


def test_a_stated_llamacpp_kv_layout_reaches_the_exporter(tmp_path) -> None:
    """`--llamacpp-kv-layout` goes to the exporter as its own flag, parsed by the exporter's
    own parser; left at auto it is not passed, and the bundled engine refuses it."""
    import argparse

    from exporter.cli import add_probe_flags
    from harness.cli import build_parser
    from harness.run.commands import exporter_command
    from harness.run.config import ConfigError, from_args

    parse = build_parser().parse_args
    exporter = argparse.ArgumentParser()
    add_probe_flags(exporter)
    for layout in ("per-slot", "unified"):
        cfg = from_args(
            parse(["run", "--workload", "chat", "--target", "http://h:1", "--llamacpp-kv-layout", layout])
        )
        argv = exporter_command(cfg, "http://h:1", 9, tmp_path)
        i = argv.index("--llamacpp-kv-layout")
        assert exporter.parse_args(argv[i : i + 2]).llamacpp_kv_layout == layout
    plain = from_args(parse(["run", "--workload", "chat", "--target", "http://h:1"]))
    assert "--llamacpp-kv-layout" not in exporter_command(plain, "http://h:1", 9, tmp_path)
    with pytest.raises(ConfigError, match="llama-server --target"):
        from_args(parse(["run", "--workload", "chat", "--llamacpp-kv-layout", "unified"]))


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan"])
def test_a_request_timeout_that_is_not_a_positive_number_is_refused(value: str) -> None:
    """The load generator arms one idle timer per request from it: zero, negative, infinite or
    NaN seconds would time out at once or never."""
    from harness.cli import build_parser
    from harness.run.config import ConfigError, from_args

    parse = build_parser().parse_args

    with pytest.raises(ConfigError, match="--request-timeout must be a positive number"):
        from_args(parse(["run", "--workload", "chat", "--request-timeout", value]))
    assert (
        from_args(parse(["run", "--workload", "chat", "--request-timeout", "2.5"])).request_timeout_s == 2.5
    )
