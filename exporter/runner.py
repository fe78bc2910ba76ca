"""The scrape loop: targets, their state, and what happens after each scrape.

One `Exporter` owns every target's state (no module-level state). Each target has its own
fixed-rate loop, so a slow or hostile target only delays itself. What grows with what a
target sends runs off the event loop: decoding, parsing and normalising a body on a worker
thread, or in a parser process once the body is large (`analysis`, `parser_process`), the
windowed values and `--record` lines on worker threads (bounded by the limits). The event
loop only fetches and swaps state, so /healthz and /metrics answer whatever a target sends.
Failures are contained per target: the loop never dies because of what a target sent, and
a parser process that dies (out of memory) is replaced. A dialect with a probe (llama.cpp's
/slots) has its paths fetched concurrently with the scrape, with the target's credentials,
from the scrape after the dialect was first recognised (or from the first, when `--dialect`
names it), within the same timeout.

Concurrency: target state is changed on the event loop only. A worker gets an immutable
input (the body, a copy of the ring buffer's point list) and returns a new value.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from exporter.analysis import Analysis, Limits, analyse_body
from exporter.credentials import CredentialError
from exporter.defaults import (
    DEFAULT_INSTANCE_LIMIT,
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_BYTES,
    DEFAULT_SAMPLE_LIMIT,
    DEFAULT_WINDOW_S,
    HISTORY_POINTS,
    HISTORY_SAMPLES,
)
from exporter.derived import Derived, derive
from exporter.diagnosis import Thresholds
from exporter.dialects import probe_for
from exporter.dialects.probe import ProbeInput, ProbeSettings, Replies
from exporter.parser_process import ParserPool
from exporter.probe import fetch_replies
from exporter.quantities import Key
from exporter.record import Recorder
from exporter.redirects import RedirectPolicy
from exporter.scrape import REASONS, ScrapeResult, Target, make_session, scrape, tls_context
from exporter.series import Point, TargetSeries

T = TypeVar("T")
MAX_THREADS = 4
# Each parser process costs ~20 MB and holds up to two bodies; two keep a 2-core box busy.
MAX_PARSERS = 2
# Bodies above this go to a parser process: ~4,000 lines, 15-20 ms of parsing on a thread.
# Below it (an 8-engine vLLM exposition is ~250 KB) the GIL stalls are a few ms and no
# process is started at all.
PROCESS_BODY_BYTES = 512 << 10

log = logging.getLogger("kvscope.exporter")


@dataclass(frozen=True, slots=True)
class Options:
    interval: float = DEFAULT_INTERVAL_S
    timeout: float | None = None  # default: 0.9 x interval, at least 0.2 s
    max_bytes: int = DEFAULT_MAX_BYTES
    dialect: str = "auto"
    window: float = DEFAULT_WINDOW_S
    history: int = HISTORY_POINTS
    history_samples: int = HISTORY_SAMPLES
    record_dir: Path | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)
    sample_limit: int = DEFAULT_SAMPLE_LIMIT
    instance_limit: int = DEFAULT_INSTANCE_LIMIT
    redirects: RedirectPolicy = "same-origin"
    ca_file: str | None = None  # PEM CAs to verify https targets with (default: the system's)
    probe: bool = True  # fetch the extra endpoints a dialect reads (see dialects.probe)
    probe_settings: ProbeSettings = field(default_factory=ProbeSettings)

    @property
    def scrape_timeout(self) -> float:
        return self.timeout if self.timeout is not None else max(0.2, 0.9 * self.interval)

    @property
    def limits(self) -> Limits:
        return Limits(self.sample_limit, self.instance_limit)


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
    over_limit: str | None = None  # the limit the last analysed scrape went past, if any

    def count(self, reason: str) -> None:
        self.errors[reason] = self.errors.get(reason, 0) + 1


class Exporter:
    def __init__(self, targets: list[Target], options: Options | None = None) -> None:
        self.options = options or Options()
        self.options.limits  # noqa: B018 - validates the limits now, not at the first scrape
        names = [t.name for t in targets]
        if len(set(names)) != len(names):
            raise ValueError(f"target names must be unique: {names}")
        self.states = [
            TargetState(t, TargetSeries(self.options.history, self.options.history_samples)) for t in targets
        ]
        self.recorder = Recorder(self.options.record_dir) if self.options.record_dir else None
        self._pool: ThreadPoolExecutor | None = None
        self._parsers: ParserPool | None = None

    @property
    def ingests(self) -> int:
        """Scrape results taken in so far. What /metrics shows changes only when this moves,
        so a rendering is reusable until then (HA Prometheus pairs fetch between ticks)."""
        return sum(st.scrapes for st in self.states)

    def state(self, name: str) -> TargetState | None:
        return next((s for s in self.states if s.target.name == name), None)

    async def in_worker(self, fn: Callable[..., T], *args: Any) -> T:
        """Run `fn(*args)` on the exporter's worker threads."""
        if self._pool is None:
            workers = max(1, min(MAX_THREADS, len(self.states)))
            self._pool = ThreadPoolExecutor(workers, thread_name_prefix="kvscope-exporter")
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _probe_input(self, replies: Replies | None) -> ProbeInput:
        unprobed = "the first scrape, before the dialect was known" if self.options.probe else "--no-probe"
        return ProbeInput(replies, unprobed, self.options.probe_settings)

    async def _analyse(self, result: ScrapeResult, probe: ProbeInput) -> Analysis:
        """Off the event loop: a small body on a worker thread (a few ms of parsing), a large
        one in a parser process (see `parser_process` for why not a thread); the processes
        start only once a target sends a large body."""
        body, result.text = result.text, None  # the body travels on; nothing here keeps it
        opts = self.options
        args = (body, result.charset, opts.dialect, opts.limits, probe)
        del body
        if isinstance(args[0], str) or len(args[0]) <= PROCESS_BODY_BYTES:  # type: ignore[arg-type]
            return await self.in_worker(analyse_body, *args)
        if self._parsers is None:
            self._parsers = ParserPool(min(MAX_PARSERS, len(self.states)))
        return await self._parsers.analyse(*args)  # type: ignore[arg-type]

    def ingest(
        self, state: TargetState, result: ScrapeResult, t: float, replies: Replies | None = None
    ) -> Point:
        """Take in one scrape result (and its probe replies), all on the calling thread (tests,
        one-off use)."""
        analysis = None
        if result.text is not None:
            opts = self.options
            probe = self._probe_input(replies)
            analysis = analyse_body(result.text, result.charset, opts.dialect, opts.limits, probe)
        point = self._apply(state, result, analysis, t)
        state.derived = self._derive_and_record(state.target.name, list(state.series.points), state.dialect)
        return point

    def _probe_paths(self, state: TargetState) -> tuple[str, ...]:
        if not self.options.probe:
            return ()
        known = self.options.dialect if self.options.dialect != "auto" else state.dialect
        probe = probe_for(known)
        return probe.paths if probe is not None else ()

    async def _replies(self, session: aiohttp.ClientSession, state: TargetState) -> Replies | None:
        paths = self._probe_paths(state)
        if not paths:
            return None
        try:
            auth = state.target.credentials.header() if state.target.credentials else None
        except CredentialError:
            return None  # the scrape itself reports the credential
        o = self.options
        return await fetch_replies(session, state.target.url, paths, o.scrape_timeout, o.max_bytes, auth)

    async def scrape_target(self, session: aiohttp.ClientSession, state: TargetState) -> Point:
        t = time.time()
        o = self.options
        result, replies = await asyncio.gather(
            scrape(session, state.target, o.scrape_timeout, o.max_bytes, o.redirects),
            self._replies(session, state),
        )
        analysis = None if result.text is None else await self._analyse(result, self._probe_input(replies))
        point = self._apply(state, result, analysis, t)
        points = list(state.series.points)
        state.derived = await self.in_worker(
            self._derive_and_record, state.target.name, points, state.dialect
        )
        return point

    def _apply(self, state: TargetState, result: ScrapeResult, analysis: Analysis | None, t: float) -> Point:
        """Update the state with one scrape's outcome (on the event loop); the new Point."""
        state.scrapes += 1
        state.last_duration = result.duration
        if analysis is None:
            point = Point(t, False, reason=result.reason)
            state.last_detail = result.detail
            if result.reason == "too_large":
                state.over_limit = "body"
        else:
            point = Point(t, analysis.reason is None, analysis.instances, analysis.reason)
            state.last_detail = analysis.detail
            if analysis.reason == "internal":
                log.error("target %s: processing failed: %s", state.target.name, analysis.detail)
            state.parse_stats = analysis.parse_stats
            state.over_limit = analysis.over_limit
            for reason in analysis.partial:
                state.count(reason)
            if point.up:
                state.dialect, state.variant, state.notes = analysis.dialect, analysis.variant, analysis.notes
        if point.reason and not point.up:
            state.count(point.reason)
        state.up = point.up
        state.series.append(point)
        return point

    def _derive_and_record(self, name: str, points: list[Point], dialect: str | None) -> dict[Key, Derived]:
        try:
            derived = derive(points, self.options.window, self.options.thresholds)
        except Exception:  # noqa: BLE001 - contained: no advice this scrape, the loop goes on
            log.exception("target %s: windowed values failed", name)
            derived = {}
        if self.recorder is not None and points:
            windowed = {
                k: {"prefix_cache_hit_ratio": d.hit_ratio, "preemptions_per_second": d.preemption_rate}
                for k, d in derived.items()
            }
            self.recorder.write(name, points[-1], dialect, windowed)
        return derived

    async def scrape_all(self, session: aiohttp.ClientSession) -> list[Point]:
        """Scrape every target once, concurrently."""
        return list(await asyncio.gather(*(self.scrape_target(session, s) for s in self.states)))

    def session(self) -> aiohttp.ClientSession:
        """A scraping session with these options' timeout and TLS trust."""
        return make_session(self.options.scrape_timeout, tls_context(self.options.ca_file))

    async def run(self, stop: asyncio.Event) -> None:
        """Scrape each target every `interval`, on its own schedule, until `stop`."""
        async with self.session() as session:
            await asyncio.gather(*(self._run_target(session, st, stop) for st in self.states))

    async def _run_target(
        self, session: aiohttp.ClientSession, state: TargetState, stop: asyncio.Event
    ) -> None:
        """Fixed rate; a late tick is skipped, not queued."""
        interval = self.options.interval
        next_tick = time.monotonic()
        while not stop.is_set():
            try:
                await self.scrape_target(session, state)
            except Exception:  # noqa: BLE001 - defensive: scrape() itself never raises
                log.exception("target %s: scrape failed", state.target.name)
            now = time.monotonic()
            next_tick += interval
            if next_tick < now:
                next_tick = now + interval - math.fmod(now - next_tick, interval)
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, next_tick - now))
            except asyncio.TimeoutError:
                pass

    def close(self) -> None:
        if self._parsers is not None:
            self._parsers.kill()
            self._parsers = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)  # a worker may still be writing a record line
            self._pool = None
        if self.recorder is not None:
            self.recorder.close()
