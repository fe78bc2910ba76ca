"""The layering rules of docs/ARCHITECTURE.md hold: `lint-imports` runs the import-linter
contracts in pyproject.toml over the packages (lazy imports inside functions included), and a
deliberately broken import in a copy of the tree makes it fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

PACKAGES = ("reference_engine", "exporter", "harness", "loadtests", "dashboards", "deploy", "benchmarks")
LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    # The copy's packages must win over the editable install of this checkout.
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_tree_keeps_every_contract():
    out = lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_a_broken_import_fails_the_check(tmp_path):
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    units = tmp_path / "exporter" / "units.py"
    # Lazy, inside a function, as a careless fix would write it: still an import.
    units.write_text(units.read_text() + "\n\ndef _frame():\n    import pandas\n\n    return pandas\n")
    helper = tmp_path / "harness" / "formatting.py"
    helper.write_text(
        helper.read_text() + "\n\ndef _run():\n    from harness.run import config\n\n    return config\n"
    )

    out = lint_imports(tmp_path)

    assert out.returncode != 0, out.stdout
    assert "exporter is a light sidecar" in out.stdout and "BROKEN" in out.stdout
    assert "harness packages are layered by process context" in out.stdout
    assert "exporter.units -> pandas" in out.stdout
