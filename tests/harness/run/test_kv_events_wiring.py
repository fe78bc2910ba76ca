"""`kvscope run --kv-events`: what it checks before anything starts, and the wiring it makes
(the bundled engine's --kv-events-config on loopback, the exporter's matching --kv-events),
checked against the engine's and the exporter's own parsers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.kv_events.spec import parse_source
from harness.cli import build_parser
from harness.run import kv_events
from harness.run.commands import exporter_command
from harness.run.config import ConfigError, from_args
from reference_engine.kv_events.config import binds, parse_kv_events_config


def _cfg(*argv: str, out: Path):
    return from_args(build_parser().parse_args(["run", "--workload", "chat", "--out", str(out), *argv]))


def test_bundled_engine_gets_a_loopback_config_the_exporter_binds(tmp_path: Path) -> None:
    cfg = _cfg("--kv-events", out=tmp_path)
    assert cfg.kv_events == [kv_events.AUTO] and "--kv-events-config" not in cfg.engine_argv
    engine_flags, specs = kv_events.bundled("engine")
    assert engine_flags[0] == "--kv-events-config"
    config = parse_kv_events_config(engine_flags[1])
    assert config.publishes and not binds(config.endpoint), "the engine's PUB connects"
    (spec,) = specs
    source = parse_source(spec)
    assert source.bind and source.endpoint == config.endpoint and source.replay == config.replay_endpoint
    assert source.topic == config.topic and source.name == "engine"
    assert all(e.startswith("tcp://127.0.0.1:") for e in (config.endpoint, config.replay_endpoint))
    argv = exporter_command(cfg, "http://127.0.0.1:1", 9, tmp_path, specs)
    assert argv[argv.index("--kv-events") + 1] == spec


def test_a_target_is_asked_where_it_publishes(tmp_path: Path) -> None:
    for given in (["--kv-events"], ["--kv-events", "auto"]):
        cfg = _cfg("--target", "http://gpu:8000", *given, out=tmp_path)
        assert cfg.kv_events == [kv_events.AUTO]


def test_a_target_names_its_endpoints(tmp_path: Path) -> None:
    cfg = _cfg(
        "--target",
        "http://gpu:8000",
        "--kv-events",
        "tcp://gpu:5557,replay=tcp://gpu:5558",
        "--kv-events",
        "tcp://gpu2:5557",
        out=tmp_path,
    )
    specs = kv_events.for_target("gpu:8000", cfg.kv_events)
    assert specs == ["gpu:8000=tcp://gpu:5557,replay=tcp://gpu:5558", "gpu:8000-1=tcp://gpu2:5557"]
    assert [parse_source(s).name for s in specs] == ["gpu:8000", "gpu:8000-1"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "http://gpu:8000", "--kv-events", "--kv-events", "tcp://gpu:5557"], "give it alone"),
        (["--target", "http://gpu:8000", "--kv-events", "http://gpu:5557"], "must be tcp://"),
        (["--kv-events", "tcp://x:1"], "set up by kvscope"),
        (["--kv-events", "--kv-events-config", json.dumps({"enable_kv_cache_events": True})], "not both"),
        (["--kv-events", "--no-enable-prefix-caching"], "prefix cache"),
    ],
)
def test_what_cannot_work_fails_before_anything_starts(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message):
        _cfg(*argv, out=tmp_path)


def test_help_explains_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    out = capsys.readouterr().out
    assert "--kv-events" in out and "miss-ratio curve" in out and "replay_endpoint" in out
    words = " ".join(out.split())
    assert "/kv_event_sources" in words and "A `kv events:` line ends the run" in words
