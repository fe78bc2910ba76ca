"""A finding: a stable `code` (snake_case, listed in `finding_codes.CODES`) beside the
sentence a person reads. Self-check reasons and notes, the advisor's notes and verdict
reasons, run.json's notes and exit reason are findings; code branches on the code and
tests assert it, never the wording, so a sentence can be reworded freely.

In JSON a finding is {"code": ..., "text": ...}, plus "subject" (the verdict action or
metric it is about) when the code alone does not say. Bundles written before findings had
codes hold bare strings: `from_json` reads those as code `uncoded`, so old bundles still
load and render.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from harness.bundle.finding_codes import CODES, UNCODED


@dataclass(frozen=True, slots=True)
class Finding:
    """Invariant: `code` is registered in `finding_codes.CODES` (checked on construction)."""

    code: str
    text: str
    subject: str | None = None  # e.g. the verdict action "cut_context", or "TTFT"

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"finding code {self.code!r} is not in harness.bundle.finding_codes.CODES")

    def to_dict(self) -> dict[str, Any]:
        out = {"code": self.code, "text": self.text}
        return out if self.subject is None else {**out, "subject": self.subject}

    @classmethod
    def from_json(cls, value: Any) -> Finding:
        """A finding as any bundle wrote it: a dict (a code unknown to this version is kept
        as `uncoded`, its text intact) or, before codes, a bare string."""
        if isinstance(value, dict):
            code = value.get("code")
            subject = value.get("subject")
            return cls(
                code if code in CODES else UNCODED,
                str(value.get("text", "")),
                subject if isinstance(subject, str) else None,
            )
        return cls(UNCODED, str(value))


def read_findings(values: Iterable[Any] | None) -> list[Finding]:
    return [Finding.from_json(v) for v in values or []]


def texts(values: Iterable[Any] | None) -> list[str]:
    """The sentences of findings as any bundle wrote them (Finding objects, dicts or strings)."""
    return [(v if isinstance(v, Finding) else Finding.from_json(v)).text for v in values or []]


def codes(values: Iterable[Any] | None) -> list[str]:
    return [(v if isinstance(v, Finding) else Finding.from_json(v)).code for v in values or []]
