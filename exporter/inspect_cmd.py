"""`kvscope exporter inspect`: one exposition in, dialect and canonical quantities out.

For a URL whose dialect has a probe (llama.cpp: GET /slots for KV usage), the probe's paths
are fetched from the same server too; a file or stdin cannot be probed, and the notes say so.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from typing import Any, TextIO

from exporter.defaults import DEFAULT_FETCH_TIMEOUT_S, DEFAULT_MAX_BYTES
from exporter.dialects import normalise, probe_for
from exporter.dialects.common import FamilyIndex
from exporter.dialects.detect import detect
from exporter.dialects.probe import ProbeInput, ProbeReply, ProbeSettings, Replies
from exporter.parse import Exposition, parse_exposition
from exporter.probe import fetch_replies
from exporter.quantities import FACTS, QUANTITIES
from exporter.scrape import TargetError, make_session, parse_target, scrape


class SourceError(Exception):
    pass


async def _fetch(url: str, timeout: float) -> str:
    target = parse_target(url)
    async with make_session(timeout) as session:
        result = await scrape(session, target, timeout)
    if result.text is None:
        raise SourceError(f"{url}: {result.reason}: {result.detail}")
    return result.text


def read_source(source: str, timeout: float = DEFAULT_FETCH_TIMEOUT_S, stdin: TextIO | None = None) -> str:
    """Text of a file, of stdin ('-'), or of an http(s) URL; SourceError otherwise."""
    if source == "-":
        return (stdin or sys.stdin).read()
    if "://" in source:
        try:
            return asyncio.run(_fetch(source, timeout))
        except TargetError as e:
            raise SourceError(str(e)) from None
    try:
        with open(source, "rb") as f:
            return f.read().decode("utf-8", errors="replace")
    except OSError as e:
        raise SourceError(f"cannot read {source}: {e.strerror or e}") from None


async def _fetch_probe(url: str, paths: tuple[str, ...], timeout: float) -> dict[str, ProbeReply]:
    async with make_session(timeout) as session:
        return await fetch_replies(session, parse_target(url).url, paths, timeout, DEFAULT_MAX_BYTES)


def probe_source(source: str, exp: Exposition, dialect: str, timeout: float) -> Replies | None:
    """The probe replies for a URL source whose dialect has a probe, else None."""
    if "://" not in source:
        return None
    probe = probe_for(detect(FamilyIndex(exp)) if dialect == "auto" else dialect)
    return asyncio.run(_fetch_probe(source, probe.paths, timeout)) if probe else None


def report(
    text: str, dialect: str = "auto", probe: ProbeInput | None = None, exp: Exposition | None = None
) -> dict[str, Any]:
    """The inspect JSON document for one exposition text."""
    exp = exp if exp is not None else parse_exposition(text)
    norm = normalise(exp, dialect, probe)
    doc = norm.to_dict()
    parse_notes = []
    if exp.malformed:
        parse_notes.append(f"{exp.malformed} malformed lines skipped (first: {exp.first_error!r})")
    if exp.duplicates:
        parse_notes.append(f"{exp.duplicates} duplicate series dropped (first occurrence kept)")
    if exp.non_finite:
        parse_notes.append(f"{exp.non_finite} NaN/Inf values (treated as unknown)")
    doc["notes"] = parse_notes + doc["notes"]
    return _clean(doc)


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def _fmt(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def render(doc: dict[str, Any]) -> str:
    lines = [f"dialect: {doc['dialect']}" + (f" ({doc['variant']})" if doc.get("variant") else "")]
    if not doc["instances"]:
        lines.append("no engine instance has samples")
    for inst in doc["instances"]:
        labels = ", ".join(f"{k}={v}" for k, v in inst["labels"].items()) or "(no labels)"
        lines.append(f"\ninstance {inst['instance']!r} of model {inst['model']!r}  [{labels}]")
        for q in QUANTITIES + FACTS:
            lines.append(f"  {q:<30} {_fmt(inst.get(q))}")
        for h, hv in inst.get("histograms", {}).items():
            lines.append(
                f"  {h:<30} count={_fmt(hv['count'])} sum={_fmt(hv['sum'])} buckets={len(hv['bounds'])}"
            )
    if doc["notes"]:
        lines.append("\nnotes:")
        lines += [f"  - {n}" for n in doc["notes"]]
    return "\n".join(lines)


def inspect(
    source: str,
    as_json: bool = False,
    dialect: str = "auto",
    timeout: float = DEFAULT_FETCH_TIMEOUT_S,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    probe: bool = True,
    settings: ProbeSettings | None = None,
) -> int:
    try:
        text = read_source(source, timeout)
    except SourceError as e:
        print(f"kvscope exporter inspect: {e}", file=err)
        return 1
    exp = parse_exposition(text)
    replies = probe_source(source, exp, dialect, timeout) if probe else None
    unprobed = "--no-probe" if not probe else "a file or stdin; inspect the server's URL to probe it"
    doc = report(text, dialect, ProbeInput(replies, unprobed, settings or ProbeSettings()), exp)
    out.write((json.dumps(doc, indent=2) if as_json else render(doc)) + "\n")
    return 0
