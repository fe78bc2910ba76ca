"""advice.json as types: each verdict is a claim (an action, the numbers it rests on, its
projected effect in one sentence) plus what its replay showed; `Advice` is the whole file.

The advisor writes it (`advice.write_advice`), the report reads it back with `read_advice`
and renders it with `markdown.render`, so neither guesses at keys. Invariant: every number
in a verdict is in its `evidence`, `projected` or `replay` dict.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.bundle.errors import BundleError
from harness.bundle.jsonfile import read_json_object

ADVICE_JSON = "advice.json"


@dataclass(frozen=True, slots=True)
class Claim:
    action: str  # one of exporter.diagnosis.ACTIONS, or route_by_prefix (advisor only: KV events)
    title: str
    evidence: dict[str, Any]
    projected: dict[str, Any]
    effect: str  # the projected effect in one sentence


VerdictStatus = str  # "verified" | "indicative" | "not confirmed" | "not replayed"


@dataclass(frozen=True, slots=True)
class Verdict(Claim):
    """A claim and its test: `verified` only when a replay confirmed it over a baseline that
    reproduces the run; "indicative" when the replay shows the gain but its baseline misses
    the run (`status_reason` says by how much)."""

    verified: bool
    replay: dict[str, Any] | None = None
    alternatives: list[dict[str, Any]] = field(default_factory=list)  # other changes replayed
    status: VerdictStatus = "not replayed"
    status_reason: str | None = None
    check: dict[str, Any] | None = None  # the change applied and measured (`kvscope advise --verify`)


@dataclass(frozen=True, slots=True)
class Advice:
    source: str
    deployment: dict[str, Any]
    diagnosis: dict[str, Any]
    workload: dict[str, Any]
    verdicts: list[Verdict]
    notes: list[str]
    time_axis: str | None = None
    missing_facts: list[dict[str, Any]] = field(default_factory=list)  # facts.MissingFact.to_json()
    fidelity: dict[str, Any] | None = None  # the unchanged configuration's replay against the run

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "verdicts": [asdict(v) for v in self.verdicts]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Advice:
        names = {f.name for f in fields(cls)}
        verdict_names = {f.name for f in fields(Verdict)}
        return cls(
            **{k: v for k, v in data.items() if k in names and k != "verdicts"},
            verdicts=[
                Verdict(**{k: v for k, v in d.items() if k in verdict_names}) for d in data["verdicts"]
            ],
        )


def read_advice(directory: Path) -> Advice | None:
    """The folder's advice.json, or None when it has none; BundleError when the file is not
    what `Advice.to_json` writes."""
    path = directory / ADVICE_JSON
    if not path.exists():
        return None
    try:
        return Advice.from_json(read_json_object(path))
    except (TypeError, KeyError) as exc:
        raise BundleError(f"{path} is not kvscope advice: {exc!r}") from None
