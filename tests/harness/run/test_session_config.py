"""`kvscope run` refuses session workloads' bad inputs before anything starts: a value that
allows a session of no turns (argparse, naming the flag) and a dataset with no conversation
(a configuration error naming the file); good ones travel to Locust as given."""

from __future__ import annotations

import pytest

from harness.cli import build_parser
from harness.run.config import ConfigError, from_args
from tests.support.paths import ROOT

CONVERSATIONS = ROOT / "tests" / "fixtures" / "conversations" / "sharegpt_multi_turn.json"


def test_session_options_travel_to_locust_as_given(tmp_path) -> None:
    argv = ["run", "--workload", "multi_turn", "--turns", "2-6", "--turn-think-time", "exp:5"]
    cfg = from_args(build_parser().parse_args([*argv, "--sessions", "20", "--dataset", str(CONVERSATIONS),
                                               "--out", str(tmp_path / "a")]))  # fmt: skip
    forwarded = cfg.workload_argv
    assert forwarded[forwarded.index("--turns") + 1] == "2-6" and "exp:5" in forwarded and "20" in forwarded
    agentic = from_args(build_parser().parse_args(["run", "--workload", "agentic", "--tool-role", "user",
                                                   "--out", str(tmp_path / "b")]))  # fmt: skip
    assert agentic.workload_argv[agentic.workload_argv.index("--tool-role") + 1] == "user"


@pytest.mark.parametrize("flag", ["--turns", "--user-tokens", "--answer-tokens"])
def test_a_distribution_that_allows_zero_is_refused_naming_its_flag(flag, capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--workload", "multi_turn", flag, "0-3"])
    assert f"argument {flag}: '0-3': the range starts below 1" in capsys.readouterr().err


def test_a_dataset_without_conversations_is_a_configuration_error(tmp_path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('[{"conversations": [{"from": "gpt", "value": "hello"}]}]')
    argv = ["run", "--workload", "multi_turn", "--dataset", str(empty), "--out", str(tmp_path / "x")]
    with pytest.raises(ConfigError, match="--dataset: .*no conversation with a human turn among 1 item"):
        from_args(build_parser().parse_args(argv))
    with pytest.raises(ConfigError, match="workload 'agentic' has no option"):
        from_args(
            build_parser().parse_args(["run", "--workload", "agentic", "--dataset", str(CONVERSATIONS)])
        )
