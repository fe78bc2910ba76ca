"""The scrape loop: targets, their state, and what happens after each scrape.

One `Exporter` owns every target's state (no module-level state). Each tick scrapes all
targets concurrently; each scrape is bounded by its own timeout, so one slow target cannot
delay the others beyond it. Parse/normalise failures are contained per target: the loop
never dies because of what a target sent. A dialect with a probe (llama.cpp's /slots) has its
paths fetched concurrently with the scrape, from the scrape after the dialect was first
recognised (or from the first, when `--dialect` names it), within the same timeout.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from exporter.defaults import DEFAULT_INTERVAL_S, DEFAULT_MAX_BYTES, DEFAULT_WINDOW_S, HISTORY_POINTS
from exporter.diagnosis import Diagnosis, Thresholds, diagnose
from exporter.dialects import normalise, probe_for
from exporter.dialects.probe import ProbeInput, ProbeSettings, Replies
from exporter.parse import parse_exposition
from exporter.probe import fetch_replies
from exporter.quantities import Key
from exporter.record import Recorder
from exporter.scrape import REASONS, ScrapeResult, Target, make_session, scrape
from exporter.series import Point, TargetSeries, hit_ratio, preemption_rate

log = logging.getLogger("kvscope.exporter")


@dataclass(frozen=True, slots=True)
class Options:
    interval: float = DEFAULT_INTERVAL_S
    timeout: float | None = None  # default: 0.9 x interval, at least 0.2 s
    max_bytes: int = DEFAULT_MAX_BYTES
    dialect: str = "auto"
    window: float = DEFAULT_WINDOW_S
    history: int = HISTORY_POINTS
    record_dir: Path | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    probe: bool = True  # fetch the extra endpoints a dialect reads (see dialects.probe)
    probe_settings: ProbeSettings = field(default_factory=ProbeSettings)

    @property
    def scrape_timeout(self) -> float:
        return self.timeout if self.timeout is not None else max(0.2, 0.9 * self.interval)


@dataclass(slots=True)
class Derived:
    hit_ratio: float | None
    preemption_rate: float | None
    diagnosis: Diagnosis

    def to_dict(self) -> dict[str, Any]:
        return {
            "prefix_cache_hit_ratio": self.hit_ratio,
            "preemptions_per_second": self.preemption_rate,
            "advice": {a: v for a, v in self.diagnosis.advice.items()},
            "advice_reasons": dict(self.diagnosis.reasons),
        }


@dataclass(slots=True)
class TargetState:
    target: Target
    series: TargetSeries
    errors: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    up: bool = False
    scrapes: int = 0
    last_duration: float | None = None
    last_detail: str = ""
    dialect: str | None = None
    variant: str | None = None
    notes: list[str] = field(default_factory=list)
    parse_stats: dict[str, int] = field(default_factory=dict)
    derived: dict[Key, Derived] = field(default_factory=dict)

    def count(self, reason: str) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + 1


class Exporter:
    def __init__(self, targets: list[Target], options: Options | None = None) -> None:
        self.options = options or Options()
        names = [t.name for t in targets]
        if len(set(names)) != len(names):
            raise ValueError(f"target names must be unique: {names}")
        self.states = [TargetState(t, TargetSeries(self.options.history)) for t in targets]
        self.recorder = Recorder(self.options.record_dir) if self.options.record_dir else None

    @property
    def ingests(self) -> int:
        """Scrape results taken in so far. What /metrics shows changes only when this moves,
        so a rendering is reusable until then (HA Prometheus pairs fetch between ticks)."""
        return sum(st.scrapes for st in self.states)

    def state(self, name: str) -> TargetState | None:
        return next((s for s in self.states if s.target.name == name), None)

    def ingest(
        self, state: TargetState, result: ScrapeResult, t: float, replies: Replies | None = None
    ) -> Point:
        """Turn one scrape result into a Point, update counters and derived values."""
        state.scrapes += 1
        state.last_duration = result.duration
        point = Point(t, False, reason=result.reason)
        if result.text is not None:
            try:
                point = self._process(state, result.text, t, replies)
            except Exception as e:  # noqa: BLE001 - contained: counted, the loop goes on
                log.exception("target %s: processing failed", state.target.name)
                point = Point(t, False, reason="internal")
                state.last_detail = f"internal error: {type(e).__name__}: {e}"
        else:
            state.last_detail = result.detail
        if point.reason and not point.up:
            state.count(point.reason)
        state.up = point.up
        state.series.append(point)
        state.derived = self._derive(state) if point.up else {}
        if self.recorder is not None:
            derived = {
                k: {"prefix_cache_hit_ratio": d.hit_ratio, "preemptions_per_second": d.preemption_rate}
                for k, d in state.derived.items()
            }
            self.recorder.write(state.target.name, point, state.dialect, derived)
        return point

    def _process(self, state: TargetState, text: str, t: float, replies: Replies | None) -> Point:
        exp = parse_exposition(text)
        state.parse_stats = {
            "samples": exp.sample_count,
            "malformed_lines": exp.malformed,
            "duplicate_series": exp.duplicates,
            "non_finite": exp.non_finite,
        }
        if exp.sample_count == 0 and exp.malformed > 0:
            state.last_detail = f"no valid sample; first bad line: {exp.first_error!r}"
            return Point(t, False, reason="not_metrics")
        for reason in ("malformed_lines", "duplicate_series", "non_finite"):
            if state.parse_stats[reason]:
                state.count(reason)
        unprobed = "the first scrape, before the dialect was known" if self.options.probe else "--no-probe"
        norm = normalise(
            exp, self.options.dialect, ProbeInput(replies, unprobed, self.options.probe_settings)
        )
        if norm.dialect == "unknown":
            state.count("unknown_dialect")
        state.dialect, state.variant, state.notes = norm.dialect, norm.variant, norm.notes
        state.last_detail = f"first bad line: {exp.first_error!r}" if exp.first_error else ""
        return Point(t, True, {s.key: s for s in norm.instances})

    def _derive(self, state: TargetState) -> dict[Key, Derived]:
        latest = state.series.latest()
        out: dict[Key, Derived] = {}
        if latest is None:
            return out
        for key in latest.instances:
            window = state.series.window(key, self.options.window)
            out[key] = Derived(
                hit_ratio(window), preemption_rate(window), diagnose(window, self.options.thresholds)
            )
        return out

    def _probe_paths(self, state: TargetState) -> tuple[str, ...]:
        if not self.options.probe:
            return ()
        known = self.options.dialect if self.options.dialect != "auto" else state.dialect
        probe = probe_for(known)
        return probe.paths if probe is not None else ()

    async def scrape_target(self, session: aiohttp.ClientSession, state: TargetState) -> Point:
        t = time.time()
        o = self.options
        metrics = scrape(session, state.target, o.scrape_timeout, o.max_bytes)
        paths = self._probe_paths(state)
        if not paths:
            return self.ingest(state, await metrics, t)
        result, replies = await asyncio.gather(
            metrics, fetch_replies(session, state.target.url, paths, o.scrape_timeout, o.max_bytes)
        )
        return self.ingest(state, result, t, replies)

    async def scrape_all(self, session: aiohttp.ClientSession) -> list[Point]:
        return list(await asyncio.gather(*(self.scrape_target(session, s) for s in self.states)))

    async def run(self, stop: asyncio.Event) -> None:
        """Scrape every `interval` (fixed rate; a late tick is skipped, not queued) until `stop`."""
        interval = self.options.interval
        async with make_session(self.options.scrape_timeout) as session:
            next_tick = time.monotonic()
            while not stop.is_set():
                try:
                    await self.scrape_all(session)
                except Exception:  # noqa: BLE001 - defensive: scrape() itself never raises
                    log.exception("scrape tick failed")
                now = time.monotonic()
                next_tick += interval
                if next_tick < now:
                    next_tick = now + interval - math.fmod(now - next_tick, interval)
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, next_tick - now))
                except asyncio.TimeoutError:
                    pass

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
