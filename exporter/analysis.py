"""One fetched exposition in, everything the exporter keeps of it out: decode, parse,
limits, normalise, impossible values. Pure: the scrape loop runs `analyse_body` in a worker
process, so a large or hostile body never blocks the event loop that answers /healthz and
/metrics, not even through the GIL (a thread parsing 50,000 samples, its garbage collection
and the freeing of what it built, held the GIL for tens of milliseconds at a time).

Limits (per target, like Prometheus's sample_limit, which fails the whole scrape): more
than `sample_limit` sample lines (valid, duplicate or malformed), more than
`LINES_PER_SAMPLE` x that many lines in all (comments, blank lines), or more than
`instance_limit` engine instances refuse the scrape: nothing of it is used, the target is
down and over its limit. Parsing stops at the limit, so the work is bounded by the limits,
not by what a target sends.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field

from exporter.dialects import normalise
from exporter.dialects.probe import ProbeInput
from exporter.dialects.sample import EngineSample
from exporter.parse import parse_exposition
from exporter.quantities import Key

# A family has at most HELP, TYPE and UNIT lines besides its samples.
LINES_PER_SAMPLE = 4


@dataclass(frozen=True, slots=True)
class Limits:
    sample_limit: int
    instance_limit: int

    def __post_init__(self) -> None:
        if self.sample_limit < 1 or self.instance_limit < 1:
            raise ValueError("the sample and instance limits must be at least 1")


@dataclass(slots=True)
class Analysis:
    """`reason` set: the scrape is refused (target down) and `instances` is empty; `partial`
    lists the reasons counted while the target stays up. `over_limit` names the limit a
    refused scrape went past ("samples", "lines", "instances")."""

    reason: str | None
    detail: str
    instances: dict[Key, EngineSample] = field(default_factory=dict)
    partial: list[str] = field(default_factory=list)
    parse_stats: dict[str, int] = field(default_factory=dict)
    dialect: str | None = None
    variant: str | None = None
    notes: list[str] = field(default_factory=list)
    over_limit: str | None = None


def exposition_text(body: str | bytes, charset: str = "utf-8") -> str:
    if isinstance(body, str):
        return body
    try:
        return body.decode(charset, errors="replace")
    except LookupError:  # an unknown charset name: metrics are ASCII/UTF-8 anyway
        return body.decode("utf-8", errors="replace")


def analyse_body(
    body: str | bytes, charset: str, dialect: str, limits: Limits, probe: ProbeInput | None = None
) -> Analysis:
    """`analyse` of a raw or decoded body; never raises: a bug is an "internal" Analysis whose
    detail carries the traceback's last lines (it may run in another process)."""
    try:
        return analyse(exposition_text(body, charset), dialect, limits, probe)
    except Exception as e:  # noqa: BLE001 - contained: counted, the loop goes on
        where = "".join(traceback.format_exception(e)[-3:]).strip()
        return Analysis("internal", f"internal error: {type(e).__name__}: {e}\n{where}")


def analyse(text: str, dialect: str, limits: Limits, probe: ProbeInput | None = None) -> Analysis:
    """`probe`: the dialect probe's fetched replies (or why there are none), see `dialects`."""
    exp = parse_exposition(text, limits.sample_limit, LINES_PER_SAMPLE * limits.sample_limit)
    stats = {
        "samples": exp.sample_count,
        "malformed_lines": exp.malformed,
        "duplicate_series": exp.duplicates,
        "non_finite": exp.non_finite,
    }
    if exp.over_limit == "samples":
        detail = f"more than {limits.sample_limit} samples (--sample-limit)"
        return Analysis("sample_limit", detail, parse_stats=stats, over_limit="samples")
    if exp.over_limit == "lines":
        lines = LINES_PER_SAMPLE * limits.sample_limit
        detail = f"more than {lines} lines ({LINES_PER_SAMPLE} x --sample-limit)"
        return Analysis("sample_limit", detail, parse_stats=stats, over_limit="lines")
    if exp.sample_count == 0 and exp.malformed > 0:
        return Analysis(
            "not_metrics", f"no valid sample; first bad line: {exp.first_error!r}", parse_stats=stats
        )
    partial = [r for r in ("malformed_lines", "duplicate_series", "non_finite") if stats[r]]
    detail = f"first bad line: {exp.first_error!r}" if exp.first_error else ""
    norm = normalise(exp, dialect, probe)
    del exp  # the parsed exposition is the largest thing here; only the samples are kept
    if len(norm.instances) > limits.instance_limit:
        detail = (
            f"{len(norm.instances)} engine instances, more than {limits.instance_limit} (--instance-limit)"
        )
        return Analysis("instance_limit", detail, parse_stats=stats, over_limit="instances")
    stats["impossible_values"] = norm.impossible
    if norm.impossible:
        partial.append("impossible_values")
    if norm.dialect == "unknown":
        partial.append("unknown_dialect")
    return Analysis(
        None,
        detail,
        {s.key: s for s in norm.instances},
        partial,
        stats,
        norm.dialect,
        norm.variant,
        norm.notes,
    )
