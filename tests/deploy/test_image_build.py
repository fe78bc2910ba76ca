"""The exporter image, built from deploy/images/exporter.Dockerfile with Podman and started
from its own configuration.

No registry is reachable here, so the image is built on the stand-in base of
deploy/offline_build.py (Debian bookworm's Python 3.11 instead of the pinned python:3.11-slim).
Podman's OCI runtime cannot start containers on this host (cgroups in hybrid mode; rlimits
that cannot be set), so the image's entrypoint runs under `buildah run` with chroot isolation:
the image's own filesystem, user and installed packages, the host's network (loopback target).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from deploy import offline_build
from tests.deploy.live_target import HEAVY, check_exporter_scrapes
from tests.support.prometheus import free_port


def inspect(image: str) -> dict:
    out = subprocess.run(["podman", "image", "inspect", image], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0]


@pytest.fixture(scope="module")
def exporter_image():
    return offline_build.build("exporter")


@pytest.fixture
def container(exporter_image):
    name = subprocess.run(
        ["buildah", "from", exporter_image], capture_output=True, text=True, check=True
    ).stdout.strip()
    yield name
    subprocess.run(["buildah", "rm", name], capture_output=True, check=False)


def buildah_run(container: str, *argv: str, env: tuple[str, ...] = ()) -> list[str]:
    return ["buildah", "run", "--isolation", "chroot", *(f"--env={e}" for e in env), container, "--", *argv]


@pytest.mark.slow
def test_exporter_image_config_is_non_root_with_healthcheck(exporter_image):
    image = inspect(exporter_image)
    config = image["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["kvscope", "exporter"]
    assert "9400/tcp" in config["ExposedPorts"]
    assert "KVSCOPE_HEALTHZ_URL=http://127.0.0.1:9400/healthz" in config["Env"]
    assert image["Healthcheck"]["Test"][:2] == ["CMD", "python"]  # Docker format keeps HEALTHCHECK


@pytest.mark.slow
def test_exporter_image_has_nothing_heavy_and_its_entrypoint_scrapes(exporter_image, container, vllm_target):
    modules = sorted(HEAVY | {"aiohttp"})
    script = (
        "import importlib.util as u, json; "
        f"print(json.dumps({{m: bool(u.find_spec(m)) for m in {modules!r}}}))"
    )
    found = subprocess.run(
        buildah_run(container, "python", "-c", script), capture_output=True, text=True, timeout=60
    )
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout) == {"aiohttp": True, **{m: False for m in HEAVY}}
    whoami = subprocess.run(buildah_run(container, "id", "-u"), capture_output=True, text=True, check=True)
    assert whoami.stdout.strip() == "10001"

    entrypoint = inspect(exporter_image)["Config"]["Entrypoint"]
    port = free_port()
    exporter = subprocess.Popen(
        buildah_run(container, *entrypoint, f"--listen=127.0.0.1:{port}", f"--target=vllm={vllm_target}",
                    "--interval=200ms"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        check_exporter_scrapes(exporter, port, timeout_s=60)
        # The image's HEALTHCHECK command, pointed at this exporter, passes; at a dead port it fails.
        health = inspect(exporter_image)["Healthcheck"]["Test"][1:]
        for url, ok in (
            (f"http://127.0.0.1:{port}/healthz", True),
            (f"http://127.0.0.1:{free_port()}/healthz", False),
        ):
            check = subprocess.run(
                buildah_run(container, *health, env=(f"KVSCOPE_HEALTHZ_URL={url}",)), timeout=60
            )
            assert (check.returncode == 0) is ok, url
    finally:
        exporter.terminate()
        exporter.wait(15)
