"""The scrape side of the projection: one instance's capacity and prefix-cache counters over
the window, from the exporter's series of the target that has the source's NAME."""

from __future__ import annotations

from exporter.kv_events.hub import ScrapeFacts, ScrapeLookup
from exporter.runner import Exporter
from exporter.series import counter_values, increase


def scrape_lookup(exporter: Exporter) -> ScrapeLookup:
    def lookup(name: str, instance: str, window_s: float) -> ScrapeFacts | None:
        state = exporter.state(name)
        latest = state.series.latest() if state is not None else None
        if latest is None:
            return None
        key = next((k for k in latest.instances if k[1] == instance), None)
        if key is None:
            return None
        sample = latest.instances[key]
        window = state.series.window(key, window_s)  # type: ignore[union-attr]
        return ScrapeFacts(
            sample.kv_capacity_blocks,
            increase(counter_values(window, "prefix_cache_queries_tokens")),
            increase(counter_values(window, "prefix_cache_hits_tokens")),
            sample.kv_block_size_tokens,
        )

    return lookup
