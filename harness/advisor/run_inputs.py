"""What the advisor reads from a results bundle: the measured requests, the server's
samples and the deployment that ran (`deployment.resolve`), through the bundle's one reader.

Invariants: a folder that is not a readable bundle raises the bundle's BundleError, a
deployment the catalogue cannot describe AdvisorError, each with a one-line message (the
CLI turns both into exit 2); nothing here mutates the bundle folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness.advisor.deployment import Deployment, resolve
from harness.bundle import read


@dataclass(frozen=True, slots=True)
class RunInputs:
    run: dict[str, Any]
    requests: pd.DataFrame  # measured requests only (calibration probes dropped)
    server: pd.DataFrame
    deployment: Deployment
    path: Path | None = None


def from_bundle(bundle: read.Bundle) -> RunInputs:
    requests = bundle.measured.reset_index(drop=True)
    return RunInputs(
        bundle.run, requests, bundle.server, resolve(bundle.deployment, bundle.server), bundle.path
    )


def load(directory: str | Path) -> RunInputs:
    return from_bundle(read.read_bundle(directory))


def from_frames(run: dict[str, Any], requests: pd.DataFrame, server: pd.DataFrame) -> RunInputs:
    return from_bundle(read.from_frames(run, requests, server))
