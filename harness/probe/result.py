"""A probe's result (probe.json): the measured terms, the server's statement, the fit and
its residuals, the concurrency table and the findings, each finding with its stable code.

probe.json's top level carries the figures a reader looks for first (`tokens_per_block`,
`fixed_blocks`, `capacity_tokens`, `stated_capacity_tokens` and its source, the
residuals, `concurrency`); a figure that could not be measured is null and a finding says
why. `fit`, `stated` and `observations` hold the detail; `from_json` reads it all back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.bundle.finding import Finding
from harness.bundle.jsonfile import read_json_object, write_json
from harness.probe.capacity import CapacityModel, ConcurrencyRow
from harness.probe.fit import PoolFit
from harness.probe.observation import RequestObservation
from harness.probe.stated import StatedPool

SCHEMA = "kvscope.probe/1"
PROBE_JSON = "probe.json"
PROBE_MD = "probe.md"


@dataclass(frozen=True, slots=True)
class ProbeResult:
    mode: str  # "live": requests sent; "bundle": a run's records and KV samples
    source: str  # the target's URL, or the bundle's folder
    stated: StatedPool
    fit: PoolFit
    concurrency: tuple[ConcurrencyRow, ...] = ()
    lengths_source: str = ""
    observations: tuple[RequestObservation, ...] = ()
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def model(self) -> CapacityModel:
        return CapacityModel.of(self.fit, self.stated)

    @property
    def codes(self) -> list[str]:
        return [f.code for f in self.findings]

    def to_json(self) -> dict[str, Any]:
        fit = self.fit
        return {
            "schema": SCHEMA,
            "mode": self.mode,
            "source": self.source,
            "tokens_per_block": fit.tokens_per_block,
            "fixed_blocks": fit.fixed_blocks,
            "whole_blocks": fit.whole_blocks,
            "usable_blocks": fit.usable_blocks,
            "usable_blocks_source": fit.usable_blocks_source,
            "capacity_tokens": fit.capacity_tokens,
            "stated_capacity_tokens": self.stated.capacity_tokens,
            "stated_capacity_source": self.stated.capacity_source,
            "stated_max_concurrency": self.stated.max_concurrency,
            "residuals": {
                "unit": fit.residual_unit,
                "rms": fit.rms_residual,
                "max_abs": fit.max_abs_residual,
                "per_point": [p.residual for p in fit.points],
            },
            "concurrency": [r.to_dict() for r in self.concurrency],
            "lengths_source": self.lengths_source,
            "findings": [f.to_dict() for f in self.findings],
            "fit": fit.to_dict(),
            "stated": self.stated.to_dict(),
            "observations": [o.to_dict() for o in self.observations],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ProbeResult:
        return cls(
            mode=str(d.get("mode", "")),
            source=str(d.get("source", "")),
            stated=StatedPool.from_dict(d.get("stated") or {}),
            fit=PoolFit.from_dict(d.get("fit") or {}),
            concurrency=tuple(ConcurrencyRow.from_dict(r) for r in d.get("concurrency") or ()),
            lengths_source=str(d.get("lengths_source", "")),
            observations=tuple(RequestObservation.from_dict(o) for o in d.get("observations") or ()),
            findings=tuple(Finding.from_json(f) for f in d.get("findings") or ()),
        )


def write_result(out: Path, result: ProbeResult, markdown: str) -> Path:
    """probe.json and probe.md in `out` (created); returns probe.json's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / PROBE_MD).write_text(markdown, encoding="utf-8")
    return write_json(out / PROBE_JSON, result.to_json())


def read_result(path: Path) -> ProbeResult:
    """probe.json from a file or the folder holding it (BundleError when unreadable)."""
    return ProbeResult.from_json(read_json_object(path / PROBE_JSON if path.is_dir() else path))
