"""advice.json as types: each verdict is a claim (an action, the numbers it rests on, its
projected effect in one sentence) plus what its replay showed; `Advice` is the whole file.

The advisor writes it (`advice.write_advice`), the report reads it back with `read_advice`
and renders it into its blocks (`harness.report.advice`), so neither guesses at keys.
Invariants: every number in a verdict is in its `evidence`, `projected` or `replay` dict;
every note and reason is a `Finding` with a code (advice.json written before codes is read
with code `uncoded`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.bundle.errors import BundleError
from harness.bundle.finding import Finding, read_findings
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
    status_reason: Finding | None = None
    check: dict[str, Any] | None = None  # the change applied and measured (`kvscope advise --verify`)

    def to_dict(self) -> dict[str, Any]:
        reason = None if self.status_reason is None else self.status_reason.to_dict()
        return {**asdict(self), "status_reason": reason}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Verdict:
        """A verdict as any advice.json wrote it (before codes, its findings were strings)."""
        names = {f.name for f in fields(cls)}
        d = {k: v for k, v in data.items() if k in names}
        reason = d.get("status_reason")
        d["status_reason"] = None if reason is None else Finding.from_json(reason)
        d["replay"] = _replay(d.get("replay"))
        d["alternatives"] = [_replay(a) for a in d.get("alternatives") or []]
        return cls(**d)


def _replay(replay: dict[str, Any] | None) -> dict[str, Any] | None:
    """A replay record with its findings (`why`, `implausible`) as dicts with a code."""
    if not replay:
        return replay
    found = {k: Finding.from_json(replay[k]).to_dict() for k in ("why", "implausible") if replay.get(k)}
    return {**replay, **found}


@dataclass(frozen=True, slots=True)
class Advice:
    source: str
    deployment: dict[str, Any]
    diagnosis: dict[str, Any]
    workload: dict[str, Any]
    verdicts: list[Verdict]
    notes: list[Finding]
    time_axis: str | None = None
    missing_facts: list[dict[str, Any]] = field(default_factory=list)  # facts.MissingFact.to_json()
    fidelity: dict[str, Any] | None = None  # the unchanged configuration's replay against the run

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "verdicts": [v.to_dict() for v in self.verdicts],
            "notes": [n.to_dict() for n in self.notes],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Advice:
        names = {f.name for f in fields(cls)}
        return cls(
            **{k: v for k, v in data.items() if k in names and k not in ("verdicts", "notes")},
            verdicts=[Verdict.from_json(d) for d in data["verdicts"]],
            notes=read_findings(data["notes"]),
        )


def read_advice(directory: Path) -> Advice | None:
    """The folder's advice.json, or None when it has none; BundleError when the file is not
    what `Advice.to_json` writes."""
    path = directory / ADVICE_JSON
    if not path.exists():
        return None
    try:
        return Advice.from_json(read_json_object(path))
    except (TypeError, KeyError, AttributeError) as exc:
        raise BundleError(f"{path} is not kvscope advice: {exc!r}") from None
