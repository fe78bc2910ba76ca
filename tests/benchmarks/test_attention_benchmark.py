"""benchmarks/kernels_gpu.py: its smoke mode runs here (interpreter, tiny shapes), and without
CUDA the real mode says so and exits 0."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
import torch

from tests.support.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "kernels_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("kernels_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_smoke_run_writes_the_report(bench, tmp_path):
    out = tmp_path / "kernels.md"
    assert bench.main(["--smoke", "--out", str(out)]) == 0
    report = out.read_text()
    for section in ("## Decode", "## 8-bit KV decode", "## Prefill", "## Targets"):
        assert section in report
    # Every measured row checks the kernel against SDPA on the same K/V (fp16 queries).
    diffs = [float(x) for x in re.findall(r"\| (\d\.\de[-+]\d\d) \|$", report, flags=re.M)]
    assert len(diffs) == 5 and max(diffs) < 1e-2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_without_cuda_it_says_so_and_exits_0(bench, capsys):
    assert bench.main([]) == 0
    assert "no CUDA device" in capsys.readouterr().out
