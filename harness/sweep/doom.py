"""Early stopping for `sweep --find-max`: an open-loop point stops as soon as it can no longer
meet its latency SLOs, so a saturated point costs seconds instead of its whole duration
(GuideLLM and inference-perf stop over-saturated benchmarks too).

"Can no longer": more requests have already missed a TTFT or E2E SLO than the attainment
target allows of all the requests the point will send. Both counts are conservative, so a
point is never stopped that its full run would have passed:
- misses are read from the server's own histogram (its /metrics, through the exporter's
  dialects), counting only requests above the first bucket bound at or past the SLO, and
  the server's TTFT is never more than the client's;
- the requests the point will send are its rate x duration plus a quarter and 5 (Poisson
  arrivals may bring more than the expected count).
Closed-loop points are never stopped: a closed loop cannot run away from the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.dialects import normalise
from exporter.dialects.sample import HistogramSample
from exporter.parse import parse_exposition
from harness.analysis.slo import Slos
from harness.run.procs import http_get

HISTOGRAMS = {"ttft": "time_to_first_token_seconds", "e2e": "e2e_request_latency_seconds"}
MARGIN = 1.25
EXTRA_REQUESTS = 5
READ_TIMEOUT_S = 2.0


def above(h: HistogramSample, slo: float) -> float:
    """Observations above the first bucket bound at or past `slo` (all surely over it)."""
    for bound, count in zip(h.bounds, h.counts):
        if bound >= slo:
            return h.counts[-1] - count
    return 0.0


@dataclass(slots=True)
class DoomWatch:
    target: str
    slos: Slos
    allowed: float  # misses the point may have and still meet the attainment target
    baseline: float | None = None
    reason: str | None = None

    @classmethod
    def for_point(
        cls, target: str, slos: Slos, attainment: float, rate: float, duration_s: float
    ) -> DoomWatch:
        expected = rate * duration_s * MARGIN + EXTRA_REQUESTS
        watch = cls(target, slos, (1 - attainment) * expected)
        watch.baseline = watch.misses()
        return watch

    def misses(self) -> float | None:
        """The most requests over any one watched SLO so far (None: /metrics unreadable)."""
        status, body = http_get(self.target + "/metrics", READ_TIMEOUT_S)
        if status != 200:
            return None
        norm = normalise(parse_exposition(body.decode(errors="replace")))
        if not norm.instances:
            return None
        hists = norm.instances[0].histograms
        counts = [
            above(hists[name], limit)
            for kind, name in HISTOGRAMS.items()
            if (limit := getattr(self.slos, kind)) is not None and name in hists
        ]
        return max(counts, default=None)

    @property
    def watching(self) -> bool:
        return any(getattr(self.slos, kind) is not None for kind in HISTOGRAMS)

    def doomed(self) -> bool:
        """True (and `reason` set) once the point can no longer meet the SLOs."""
        if not self.watching or self.baseline is None:
            return False
        now = self.misses()
        if now is None or now - self.baseline <= self.allowed:
            return False
        self.reason = (
            f"stopped early: {now - self.baseline:.0f} requests already missed the SLOs (server histogram), "
            f"more than the {self.allowed:.1f} the attainment target allows"
        )
        return True
