"""A probe's result from its parts: the fit (made here from observations, or given), the
comparison with the server's statement, and the concurrency table; the findings of every
step in order."""

from __future__ import annotations

from harness.bundle.finding import Finding
from harness.probe.capacity import CapacityModel, concurrency_table
from harness.probe.compare import compare
from harness.probe.fit import PoolFit, fit_pool
from harness.probe.observation import RequestObservation
from harness.probe.result import ProbeResult
from harness.probe.stated import StatedPool


def finish(
    source: str,
    stated: StatedPool,
    obs: list[RequestObservation],
    notes: list[Finding],
    lengths: tuple[tuple[str, int], ...],
    lengths_source: str,
    fit: PoolFit | None = None,
    mode: str = "live",
) -> ProbeResult:
    """The result from the observations (or a given fit): fit, comparison, table."""
    fit = fit if fit is not None else fit_pool(obs, stated)
    found = list(notes) + list(fit.findings)
    said = compare(fit, stated)
    if said is not None:
        found.append(said)
    table = concurrency_table(CapacityModel.of(fit, stated), list(lengths), stated)
    if not lengths:
        found.append(
            Finding(
                "no_lengths",
                "no request lengths given (--lengths, --lengths-from): only max_model_len is tabulated",
            )
        )
    return ProbeResult(mode, source, stated, fit, tuple(table), lengths_source, tuple(obs), tuple(found))
