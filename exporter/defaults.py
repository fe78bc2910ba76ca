"""The exporter's default periods and bounds, one definition each.

Shared by the command line (which must stay import-light: stdlib only) and the scrape loop.
"""

from __future__ import annotations

DEFAULT_LISTEN = ("127.0.0.1", 9400)  # loopback only unless told otherwise
DEFAULT_INTERVAL_S = 1.0  # between scrapes of one target
DEFAULT_WINDOW_S = 60.0  # for the hit ratio, preemption rate and live advice
DEFAULT_MAX_BYTES = 10 << 20  # largest exposition accepted, after decompression
DEFAULT_FETCH_TIMEOUT_S = 10.0  # one-off fetches (`inspect URL`), not the scrape loop
HISTORY_POINTS = 900  # scrapes kept per target (15 minutes at the default interval)
HISTORY_SAMPLES = 20_000  # engine samples kept per target, ~25 MB (fewer points when many instances)
# Per-target limits, like Prometheus's sample_limit: a scrape over either is refused whole.
# A vLLM V1 engine exposes ~250 samples, so 50,000 fits 64 data-parallel engines with room
# to spare and 1,000 instances any real deployment; /metrics then stays a few MB at worst.
DEFAULT_SAMPLE_LIMIT = 50_000
DEFAULT_INSTANCE_LIMIT = 1_000
