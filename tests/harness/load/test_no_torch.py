"""Locust processes never import torch or the engine: loading any locustfile stays light."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.paths import ROOT

LOADTESTS = sorted(p.stem for p in (ROOT / "loadtests").glob("*.py") if p.stem != "__init__")


def test_locustfiles_and_user_class_do_not_import_torch() -> None:
    code = (
        "import importlib, json, sys\n"
        "import harness.load.user, harness.load.fixed_length\n"
        f"for name in {LOADTESTS!r}:\n"
        "    importlib.import_module('loadtests.' + name)\n"
        "print(json.dumps({'torch': 'torch' in sys.modules,\n"
        "                  'reference_engine': 'reference_engine' in sys.modules}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"torch": False, "reference_engine": False}
    assert len(LOADTESTS) >= 7


def test_run_command_help_is_import_light() -> None:
    code = (
        "import sys\nfrom harness.cli import build_parser\nbuild_parser()\n"
        "print(sorted(m for m in ('torch', 'locust', 'pandas', 'gevent') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]"
