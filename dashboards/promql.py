"""PromQL snippets scoped by a dashboard's label selector.

Every published LLM-serving dashboard we studied gets at least one of these wrong, so the
correct shapes live here once and the dashboards only name metrics:

- counters are only ever read through `rate()` (a ratio of lifetime counters is a lifetime
  average, not what is happening now);
- `histogram_quantile` always gets `sum by (le, ...)` of bucket rates (without it every
  series gets its own quantile and the panel shows a spaghetti of per-pod numbers);
- ratios divide by `(denominator > 0)`, so an idle engine shows "no data" instead of NaN;
- windows default to `$__rate_interval`, which Grafana keeps >= 4 scrape intervals when the
  data source's `timeInterval` is set to the scrape interval.
"""

from __future__ import annotations

from dataclasses import dataclass

RATE_INTERVAL = "$__rate_interval"


def divide(numerator: str, denominator: str) -> str:
    """`numerator / (denominator > 0)`: series with a zero denominator drop out, not NaN."""
    return f"{numerator} / ({denominator} > 0)"


@dataclass(frozen=True, slots=True)
class Promql:
    """Builds expressions that all carry the same label selector and grouping.

    `selector` is the inside of `{...}` (e.g. `target=~"$target"`); `by` is the label list
    every aggregation keeps, so that one series per target/model/instance survives and the
    legends stay stable when the variables select "All".
    """

    selector: str
    by: str = ""

    def sel(self, metric: str, extra: str = "") -> str:
        parts = [p for p in (self.selector, extra) if p]
        return f"{metric}{{{', '.join(parts)}}}" if parts else metric

    def _by(self, by: str | None) -> str:
        labels = self.by if by is None else by
        return f" by ({labels})" if labels else ""

    def gauge(self, op: str, metric: str, extra: str = "", by: str | None = None) -> str:
        """An aggregated gauge, e.g. `max by (target, model, instance) (kv_usage{...})`."""
        return f"{op}{self._by(by)} ({self.sel(metric, extra)})"

    def rate(self, counter: str, extra: str = "", window: str = RATE_INTERVAL) -> str:
        return f"rate({self.sel(counter, extra)}[{window}])"

    def sum_rate(
        self, counter: str, extra: str = "", by: str | None = None, window: str = RATE_INTERVAL
    ) -> str:
        return f"sum{self._by(by)} ({self.rate(counter, extra, window)})"

    def ratio(
        self, numerator: str, denominator: str, by: str | None = None, window: str = RATE_INTERVAL
    ) -> str:
        """Ratio of two counters' rates over the same window (never of lifetime totals)."""
        return divide(
            self.sum_rate(numerator, by=by, window=window), self.sum_rate(denominator, by=by, window=window)
        )

    def quantile(self, q: float, histogram: str, by: str | None = None, window: str = RATE_INTERVAL) -> str:
        """`histogram_quantile(q, sum by (le, <by>) (rate(<histogram>_bucket[w])))`."""
        labels = self.by if by is None else by
        keep = f"le, {labels}" if labels else "le"
        return f"histogram_quantile({q}, sum by ({keep}) ({self.rate(histogram + '_bucket', window=window)}))"

    def latency_quantiles(self, histogram: str, qs: tuple[float, ...] = (0.5, 0.95, 0.99)) -> dict[str, str]:
        """The p50/p95/p99 expressions every latency panel shows, keyed `p50`, `p95`, `p99`."""
        return {f"p{round(q * 100)}": self.quantile(q, histogram) for q in qs}

    def mean(self, histogram: str, by: str | None = None, window: str = RATE_INTERVAL) -> str:
        """Mean observation: rate of `_sum` over rate of `_count` (never `rate(_sum)` alone)."""
        return self.ratio(f"{histogram}_sum", f"{histogram}_count", by=by, window=window)
