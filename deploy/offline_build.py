"""Build the images with Podman where no registry can be reached.

    python -m deploy.offline_build                   # all three images
    python -m deploy.offline_build exporter harness  # some of them
    python -m deploy.offline_build engine --build-arg TORCH_INDEX_URL=https://pypi.org/simple

The Dockerfiles pin python:3.11-slim by digest. Where no registry is reachable (an air-gapped
host, or a CI machine that reaches package registries only), this builds the same Dockerfiles
on a stand-in base instead: Debian bookworm's own Python 3.11 (the release python:3.11-slim
is built on), assembled with debootstrap from Debian's package mirror and imported into
Podman once. The images are then real images of these Dockerfiles, on a base that differs
from the published one only in where its Python comes from.

Podman runs the build steps with chroot isolation, which needs no user namespaces or cgroup
controllers, and in Docker format (the OCI image config has no HEALTHCHECK). pip inside the
build sees the host's pip configuration, CA bundle and local package folders (read-only
mounts), so it uses the same index and trust as pip on the host.

Needs the Debian packages podman, buildah and debootstrap, and root.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IMAGES_DIR = Path(__file__).resolve().parent / "images"
IMAGES = ("exporter", "harness", "engine")
BASE = "localhost/kvscope-base-python:3.11-bookworm"
DEBIAN_MIRROR = os.environ.get("KVSCOPE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
PIP_CONFIGS = (Path("/etc/pip.conf"), Path("/etc/xdg/pip/pip.conf"), Path.home() / ".config/pip/pip.conf")


def tag(image: str) -> str:
    return f"localhost/kvscope-{image}:offline"


def ensure_base() -> str:
    """The stand-in base image; built from Debian packages the first time (about a minute)."""
    if subprocess.run(["podman", "image", "exists", BASE]).returncode == 0:
        return BASE
    with tempfile.TemporaryDirectory(prefix="kvscope-base-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        packages = "python3,python3-venv,python-is-python3,ca-certificates"
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={packages}",
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            ["podman", "import", "-", BASE], stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL
        )
        if tar.wait() != 0:
            raise RuntimeError("tar of the base rootfs failed")
    return BASE


def _local_paths(value: str) -> list[Path]:
    """Local folders that one pip setting names: plain paths, and for a file:// index the
    folder above it (a PEP 503 index links its files relatively, e.g. ../files/x.whl)."""
    paths = [Path(v) for v in value.split() if v.startswith("/")]
    paths += [Path(v.removeprefix("file://")).parent for v in value.split() if v.startswith("file:///")]
    return [p for p in paths if p.exists()]


def pip_mounts() -> list[str]:
    """`-v SRC:DST:ro` for the host's pip configuration, CA bundle and the folders they name."""
    sources: dict[Path, Path] = {}
    if CA_BUNDLE.exists():
        sources[CA_BUNDLE] = CA_BUNDLE
    for config in PIP_CONFIGS:
        if config.exists():
            # The build stage runs as root: a user config lands in root's home.
            home = Path.home()
            dest = Path("/root") / config.relative_to(home) if config.is_relative_to(home) else config
            sources[config] = dest
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    for line in listed.splitlines():
        _, _, value = line.partition("=")
        for path in _local_paths(value.strip().strip("'\"")):
            sources[path] = path
    return [arg for src, dst in sources.items() for arg in ("-v", f"{src}:{dst}:ro")]


def build(image: str, build_args: tuple[str, ...] = ()) -> str:
    """Build deploy/images/<image>.Dockerfile on the stand-in base; returns the image tag.

    `build_args` are more NAME=VALUE build arguments, e.g. a torch index the host reaches.
    """
    if image not in IMAGES:
        raise ValueError(f"unknown image {image!r}; choose from {', '.join(IMAGES)}")
    for tool in ("podman", "buildah", "debootstrap"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found: apt-get install podman buildah debootstrap")
    base = ensure_base()
    built = subprocess.run(
        [
            "podman", "build", "--isolation=chroot", "--format=docker", "--quiet",
            *pip_mounts(),
            "--build-arg", f"PYTHON_IMAGE={base}",
            *(arg for value in build_args for arg in ("--build-arg", value)),
            "-f", str(IMAGES_DIR / f"{image}.Dockerfile"),
            "-t", tag(image),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if built.returncode != 0:
        raise RuntimeError(f"podman build of {image} failed:\n{built.stderr[-4000:]}")
    return tag(image)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.offline_build", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "images", nargs="*", metavar="IMAGE", help=f"any of {', '.join(IMAGES)} (default: all)"
    )
    parser.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="one more build argument (repeatable)",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.images) - set(IMAGES))
    if unknown:
        parser.error(f"unknown image(s) {', '.join(unknown)}; choose from {', '.join(IMAGES)}")
    for image in args.images or IMAGES:
        print(build(image, tuple(args.build_arg)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
