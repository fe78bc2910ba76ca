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
