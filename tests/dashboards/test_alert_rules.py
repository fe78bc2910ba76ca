"""The Prometheus alert rules and example config, checked and unit-tested by promtool.

`promtool test rules` runs dashboards/prometheus/alerts_test.yml, which shows every alert
firing on a synthetic series and staying quiet where it should (one burst of preemptions,
a hit ratio that is low because nothing is shared, an engine that flaps). This file also
makes sure that stays true as alerts are added: each alert needs both kinds of case.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from dashboards import lint
from tests.support.paths import ROOT

PROM_DIR = ROOT / "dashboards" / "prometheus"
ALERTS = PROM_DIR / "alerts.yml"
ALERT_TESTS = PROM_DIR / "alerts_test.yml"

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=PROM_DIR)


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


@needs_promtool
def test_promtool_check_rules():
    result = promtool("check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


@needs_promtool
def test_promtool_check_config():
    result = promtool("check", "config", str(PROM_DIR / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_promtool_test_rules():
    result = promtool("test", "rules", str(ALERT_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_promtool_test_rules_fails_when_a_window_changes(tmp_path):
    """The unit tests pin the windows: halving the preemption `for` must break them."""
    text = ALERTS.read_text()
    assert "for: 10m" in text
    (tmp_path / "alerts.yml").write_text(text.replace("for: 10m", "for: 5m"))
    shutil.copy(ALERT_TESTS, tmp_path / "alerts_test.yml")
    result = subprocess.run(
        ["promtool", "test", "rules", "alerts_test.yml"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "KvscopePersistentPreemption" in result.stdout + result.stderr


def test_issue_alerts_exist_with_documented_windows():
    by_name = {r["alert"]: r for r in rules() if "alert" in r}
    assert by_name["KvscopeKVCacheSaturated"]["expr"].endswith("> 0.98")
    assert "rate(kvscope_preemptions_total[5m])" in by_name["KvscopePersistentPreemption"]["expr"]
    assert by_name["KvscopePersistentPreemption"]["for"] == "10m"
    assert 'kvscope_advice{action="make_prefix_identical"}' in by_name["KvscopeLowPrefixHitRatio"]["expr"]
    assert by_name["KvscopeTargetDown"]["expr"] == "kvscope_target_up == 0"
    assert by_name["KvscopeTargetDown"]["for"] == "1m"
    for rule in by_name.values():
        assert rule["labels"]["severity"] in {"info", "warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_every_alert_is_tested_firing_and_not_firing():
    cases = [
        case
        for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    for name in (r["alert"] for r in rules() if "alert" in r):
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case.get("exp_alerts") for case in mine), f"{name} never shown firing"
        assert any(not case.get("exp_alerts") for case in mine), f"{name} never shown quiet"


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r.get("alert") or r.get("record"))
def test_rule_expressions_rate_their_counters(rule):
    assert lint.counter_problems(rule["expr"]) == []
    assert lint.quantile_problems(rule["expr"]) == []
