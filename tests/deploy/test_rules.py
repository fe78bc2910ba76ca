"""The PrometheusRule's rules, taken out of the manifest and out of the rendered chart, pass
`promtool check rules` and the repository's rule unit tests (dashboards/prometheus/alerts_test.yml)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from deploy import chart, generate
from tests.deploy.conftest import load_manifest

ALERT_TESTS = generate.ALERTS.parent / "alerts_test.yml"


def promtool(*args, cwd):
    assert shutil.which("promtool"), "promtool missing: scripts/setup.sh installs Debian's prometheus package"
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def rule_count(spec):
    return sum(len(group["rules"]) for group in spec["groups"])


def manifest_rule():
    return chart.find(load_manifest(generate.MANIFESTS_DIR / "prometheusrule.yaml"), "PrometheusRule")


def chart_rule():
    values = {"fullnameOverride": "other", "prometheusRule": {"labels": {"release": "kps"}}}
    return chart.find(chart.documents(chart.render(values)), "PrometheusRule")


@pytest.mark.parametrize("source", [manifest_rule, chart_rule], ids=["manifest", "chart"])
def test_extracted_rules_pass_promtool_check_and_the_unit_tests(source, tmp_path):
    spec = source()["spec"]
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    shutil.copy(ALERT_TESTS, tmp_path / "alerts_test.yml")  # rule_files: [alerts.yml], beside it
    check = promtool("check", "rules", "alerts.yml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {rule_count(spec)} rules found" in check.stdout
    assert rule_count(spec) == rule_count(yaml.safe_load(generate.ALERTS.read_text()))
    unit = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert unit.returncode == 0, unit.stdout + unit.stderr


def test_unit_tests_catch_a_changed_rule_in_the_extracted_spec(tmp_path):
    """The extraction path is really under test: a changed window in the manifest's rules
    fails the same unit tests."""
    spec = manifest_rule()["spec"]
    rules = {r.get("alert"): r for group in spec["groups"] for r in group["rules"]}
    rules["KvscopePersistentPreemption"]["for"] = "5m"
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    shutil.copy(ALERT_TESTS, tmp_path / "alerts_test.yml")
    unit = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert unit.returncode != 0
    assert "KvscopePersistentPreemption" in unit.stdout + unit.stderr
