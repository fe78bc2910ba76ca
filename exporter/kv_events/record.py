"""`--record DIR` for the block-level view: `DIR/kv_events/<name>.jsonl`, one line per
(instance, medium) and tick: `t`, the `TierView` fields (counters, rates, curve, hot chains,
sparse reuse-distance histogram) and the source's stream counters under `stream`.
Appended and flushed every tick, like the scrape recording beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

from exporter.kv_events.hub import KvEventsHub
from exporter.record import file_name

SUBDIR = "kv_events"


class KvRecorder:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory) / SUBDIR
        self.directory.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, IO[str]] = {}

    def write(self, hub: KvEventsHub, t: float) -> None:
        streams = {s["name"]: s for s in hub.sources_view()}
        for view in hub.views:
            f = self._files.get(view.target)
            if f is None:
                f = self._files[view.target] = open(  # noqa: SIM115 (closed by close())
                    self.directory / file_name(view.target), "a", encoding="utf-8"
                )
            stream = streams.get(view.target, {})
            row = {"t": t, **view.to_dict(), "fleet_shared_blocks": hub.fleet_shared_blocks, "stream": stream}
            f.write(json.dumps(row, allow_nan=False, default=str) + "\n")
        for f in self._files.values():
            f.flush()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
