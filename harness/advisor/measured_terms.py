"""The verdicts' effect in measured terms, where the bundle holds a probe (probe.json: `kvscope
probe --target URL --out BUNDLE`, or `kvscope probe BUNDLE` from the run itself): add_memory,
quantize_kv_cache and cut_context then say how many requests of the run's p90 length the
pool holds now and with the change ("holds 22 requests at your p90 length, 31 with the
change"), from the probe's per-request cost rather than the arithmetic
(`harness.probe.statement`). The figures go into the verdict's `projected` dict
(`measured_capacity`), the sentence at the end of its `effect`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from harness.advisor.verdicts import Proposal
from harness.bundle.errors import BundleError
from harness.bundle.finding import Finding
from harness.probe.from_bundle import length_percentiles
from harness.probe.result import PROBE_JSON, read_result
from harness.probe.statement import CapacityChange, measured_effect

MEASURED_ACTIONS = ("add_memory", "quantize_kv_cache", "cut_context")
LENGTH = "p90"


def with_measured_terms(
    proposals: list[Proposal], bundle: Path | None, requests: pd.DataFrame, notes: list[Finding]
) -> list[Proposal]:
    """`proposals` with the measured statement added where the bundle has a probe."""
    if bundle is None or not (bundle / PROBE_JSON).exists():
        return proposals
    try:
        probe = read_result(bundle / PROBE_JSON)
    except (BundleError, KeyError, TypeError) as exc:
        notes.append(
            Finding(
                "probe_unreadable", f"{PROBE_JSON} is unreadable, verdicts stay in arithmetic terms: {exc}"
            )
        )
        return proposals
    tokens = dict(length_percentiles(requests)).get(LENGTH)
    if tokens is None:
        return proposals
    out = []
    for p in proposals:
        change = p.change
        effect = None
        if p.action in MEASURED_ACTIONS and change is not None:
            pool = CapacityChange(change.num_blocks, change.replicas, change.max_model_len)
            effect = measured_effect(probe, pool, tokens, LENGTH)
        if effect is None:
            out.append(p)
            continue
        measured = {"length": LENGTH, "tokens": tokens, "holds_now": effect.before}
        measured["holds_after"] = effect.after
        out.append(
            dataclasses.replace(
                p,
                projected={**p.projected, "measured_capacity": measured},
                effect=f"{p.effect}; measured by the probe: {effect.text}",
            )
        )
    return out
