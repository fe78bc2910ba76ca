"""Fixtures for the deployment tests: the chart rendered with its defaults and the plain
manifests as parsed objects, each computed once per session (rendering runs Helm's engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy import chart, generate
from tests.deploy.live_target import VLLM_EXPOSITION
from tests.support.static_metrics import static_server


def load_manifest(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


@pytest.fixture(scope="session")
def default_render() -> dict[str, str]:
    return chart.render()


@pytest.fixture(scope="session")
def manifest_files() -> dict[str, list[dict[str, Any]]]:
    """deploy/kubernetes/<name> -> its objects, for every manifest (not the values, not the patch)."""
    paths = sorted(generate.MANIFESTS_DIR.glob("*.yaml"))
    skip = {generate.MANIFEST_VALUES.name, generate.SIDECAR_PATCH}
    return {p.name: load_manifest(p) for p in paths if p.name not in skip}


@pytest.fixture(scope="session")
def manifest_docs(manifest_files) -> list[dict[str, Any]]:
    return [doc for docs in manifest_files.values() for doc in docs]


@pytest.fixture
def vllm_target():
    """The /metrics URL of a live vLLM-dialect target on loopback."""
    with static_server(VLLM_EXPOSITION) as url:
        yield url
