"""The exporter image's requirement set, checked without container tools.

This does what the image build does, in a fresh venv. It copies the same build context (the
repository filtered by .dockerignore), runs the same `pip install` line as
exporter.Dockerfile, and then the image's ENTRYPOINT against a live target on loopback. It
fails if the exporter's dependencies pull in torch, pandas, locust or numpy, or if the
entrypoint cannot start and scrape without them. test_image_build.py builds and runs the
image itself, on a stand-in base.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.deploy.live_target import HEAVY, check_exporter_scrapes
from tests.support.paths import ROOT
from tests.support.prometheus import free_port

DOCKERFILE = ROOT / "deploy" / "images" / "exporter.Dockerfile"


def dockerfile_install_spec() -> str:
    """The requirement that the build stage installs, e.g. "/src" (no extras)."""
    (spec,) = re.findall(r"^RUN /opt/kvscope/bin/pip install (\S+)\s*$", DOCKERFILE.read_text(), re.MULTILINE)
    return spec.strip('"')


def dockerfile_entrypoint() -> list[str]:
    (line,) = re.findall(r"^ENTRYPOINT (\[.*\])\s*$", DOCKERFILE.read_text(), re.MULTILINE)
    return json.loads(line)


def dockerignored() -> Callable[[str, bool], bool]:
    """Whether .dockerignore leaves a name out of the build context (at the top, or deeper)."""
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    nested = [p.removeprefix("**/") for p in patterns if p.startswith("**/")]
    top = [p for p in patterns if not p.startswith("**/")]
    assert all("/" not in p and not p.startswith("!") for p in top + nested), "only simple patterns here"

    def ignored(name: str, at_top: bool) -> bool:
        return any(fnmatch.fnmatch(name, p) for p in nested + (top if at_top else []))

    return ignored


def build_context(dest: Path) -> Path:
    """The repository as `docker build .` sends it: what .dockerignore leaves."""
    ignored = dockerignored()

    def ignore(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if ignored(n, Path(folder) == ROOT)}

    shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


def test_the_build_context_leaves_out_what_git_ignores():
    # The test command puts venvs of several GB in the checkout (.venv-vllm): one that reaches
    # the build context is copied into every image build and filled a CI machine's disk.
    names = {p.name for p in ROOT.iterdir()}
    for line in (ROOT / ".gitignore").read_text().splitlines():
        pattern = line.strip().strip("/")
        if pattern and not pattern.startswith("#") and "/" not in pattern:
            names.add(pattern.replace("*", "x"))
    checked = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        input="\n".join(sorted(names)),
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    git_ignored = set(checked.stdout.split())
    assert {".venv", ".venv-vllm", "x.gguf"} <= git_ignored
    ignored = dockerignored()
    assert sorted(n for n in git_ignored if not ignored(n, True)) == []


@pytest.mark.slow
def test_exporter_image_requirements_are_light_and_its_entrypoint_scrapes(tmp_path, vllm_target):
    assert dockerfile_install_spec() == "/src", "the exporter image must install base dependencies only"
    src = build_context(tmp_path / "src")
    assert not (src / "tests").exists() and not (src / ".git").exists()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    listed = subprocess.run(
        [str(venv / "bin" / "pip"), "list", "--format=json"], capture_output=True, text=True, check=True
    )
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(listed.stdout)}
    assert {"kvscope", "aiohttp", "prometheus-client", "msgspec", "pyzmq"} <= installed
    assert installed.isdisjoint(HEAVY), sorted(installed & HEAVY)

    entrypoint = [str(venv / "bin" / dockerfile_entrypoint()[0]), *dockerfile_entrypoint()[1:]]
    helped = subprocess.run([*entrypoint, "--help"], capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0, helped.stderr
    assert "--target" in helped.stdout and "/healthz" in helped.stdout

    port = free_port()
    exporter = subprocess.Popen(
        [*entrypoint, f"--listen=127.0.0.1:{port}", f"--target=vllm={vllm_target}", "--interval=200ms"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        check_exporter_scrapes(exporter, port, timeout_s=30)
    finally:
        exporter.terminate()
        exporter.wait(10)
