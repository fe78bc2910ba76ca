"""The exporter's tests must run in the slim sidecar environment (see this folder's
`__init__`): importing every test module here, with the packages a sidecar lacks made
unimportable, must succeed. What the exporter package itself imports is checked in
test_exporter_cli.py; this checks the tests and the support modules they pull in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.paths import ROOT

ABSENT = ("torch", "numpy", "pandas", "locust", "harness", "reference_engine", "loadtests", "dashboards")

CODE = """
import importlib, sys
absent = set(sys.argv[1].split(","))
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in absent:
            raise ImportError(f"{name} is not installed in the sidecar")
sys.meta_path.insert(0, Absent())
for module in sys.argv[2:]:
    importlib.import_module(module)
"""


def test_every_exporter_test_module_imports_without_the_heavy_packages() -> None:
    modules = ["tests.conftest"] + [
        f"tests.exporter.{p.stem}" for p in sorted(Path(__file__).parent.glob("test_*.py"))
    ]
    assert len(modules) > 8
    proc = subprocess.run(
        [sys.executable, "-c", CODE, ",".join(ABSENT), *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
