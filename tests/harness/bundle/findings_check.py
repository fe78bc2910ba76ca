"""Every finding a bundle's JSON files hold, at the places findings go (run.json's notes and
exit reason, summary.json's self-check and run notes, advice.json's notes, verdict reasons,
replay reasons and fidelity), for tests that check each carries a registered code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.bundle.finding_codes import CODES, UNCODED


def _replay(r: dict[str, Any] | None) -> list[Any]:
    if not r:
        return []
    fidelity = r.get("baseline_fidelity") or {}
    return [r[k] for k in ("why", "implausible") if k in r] + ([fidelity["reason"]] if fidelity else [])


def bundle_findings(folder: Path) -> list[Any]:
    def read(name: str) -> dict[str, Any]:
        path = folder / name
        return json.loads(path.read_text()) if path.exists() else {}

    run, summary, advice = read("run.json"), read("summary.json"), read("advice.json")
    found = list(run.get("notes") or []) + ([run["exit"]["reason"]] if "exit" in run else [])
    check = summary.get("selfcheck") or {}
    found += list(check.get("reasons") or []) + list(check.get("notes") or [])
    found += list((summary.get("run") or {}).get("notes") or [])
    found += list(advice.get("notes") or [])
    found += [advice["fidelity"]["reason"]] if advice.get("fidelity") else []
    for v in advice.get("verdicts") or []:
        found += [v["status_reason"]] if v.get("status_reason") is not None else []
        found += _replay(v.get("replay"))
        for alt in v.get("alternatives") or []:
            found += _replay(alt)
    return found


def assert_coded(folder: Path) -> list[str]:
    """Every finding in the folder's JSON is {"code": <registered>, "text": ...}; their codes."""
    found = bundle_findings(folder)
    for f in found:
        assert isinstance(f, dict) and f.get("code") in CODES and f["code"] != UNCODED, f
        assert isinstance(f.get("text"), str) and f["text"], f
    return [f["code"] for f in found]
