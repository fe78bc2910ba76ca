"""What the advisor reads from a results bundle: the measured requests, the server's
samples and the deployment that ran (`deployment.resolve`), through the bundle's one reader.
What the user states to `kvscope advise --deployment` is merged into the recorded facts
first (it wins; `notes` say where it replaced what the run recorded).

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
from harness.bundle.deployment import DeploymentFacts, Fact
from harness.bundle.deployment_option import with_user_facts
from harness.bundle.finding import Finding


@dataclass(frozen=True, slots=True)
class RunInputs:
    run: dict[str, Any]
    requests: pd.DataFrame  # measured requests only (calibration probes dropped)
    server: pd.DataFrame
    deployment: Deployment
    path: Path | None = None
    notes: tuple[Finding, ...] = ()  # where --deployment replaced a recorded fact


def from_bundle(bundle: read.Bundle, stated: dict[str, dict[str, Fact]] | None = None) -> RunInputs:
    requests = bundle.measured.reset_index(drop=True)
    facts, notes = bundle.deployment, []
    if stated and any(stated.values()):
        facts, notes = with_user_facts(facts or DeploymentFacts("target"), stated)
    return RunInputs(
        bundle.run,
        requests,
        bundle.server,
        resolve(facts, bundle.server),
        bundle.path,
        tuple(Finding("deployment_replaced", n) for n in notes),
    )


def load(directory: str | Path, stated: dict[str, dict[str, Fact]] | None = None) -> RunInputs:
    return from_bundle(read.read_bundle(directory), stated)


def from_frames(run: dict[str, Any], requests: pd.DataFrame, server: pd.DataFrame) -> RunInputs:
    return from_bundle(read.from_frames(run, requests, server))
