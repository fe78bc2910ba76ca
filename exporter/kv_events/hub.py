"""Every --kv-events source of one exporter, and the per-second derivation over them.

`tick()` (once per scrape interval, from the exporter's event loop) takes each instance's
counters under its source's lock, keeps them for the window, and derives one `TierView` per
(source, instance, medium): rates, cached blocks, capacity misses, the miss-ratio curve
with its projected hit ratios, hot chains and blocks shared with other replicas. Readers
(the collector, the JSON API, the recorder) only see the views of the last tick.

The projection needs the instance's prefix-cache counters and capacity, which the scrape of
the target with the same NAME provides (`ScrapeLookup`): the instance whose label matches
the events' data-parallel rank. Without that target, the curve still counts avoidable
misses, but has no hit ratio.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.kv_events.blocks import PRIMARY, Tier
from exporter.kv_events.chains import HotChain, hot_chains, shared_blocks
from exporter.kv_events.curve import CurvePoint, extra_blocks, projected_hit_ratio
from exporter.kv_events.discover import Note
from exporter.kv_events.source import Limits, SourceState
from exporter.kv_events.spec import KvEventsSource


@dataclass(frozen=True, slots=True)
class ScrapeFacts:
    """What the target's scrape says about one instance over the window."""

    capacity_blocks: float | None
    queried_tokens: float | None
    hit_tokens: float | None
    block_size: float | None = None


# (source name, instance) -> facts, or None when no such target or instance is scraped
ScrapeLookup = Callable[[str, str, float], ScrapeFacts | None]


@dataclass(frozen=True, slots=True)
class _Snapshot:
    t: float
    stored: int
    removed: int
    misses: int
    avoidable: dict[float, int]


@dataclass(slots=True)
class TierView:
    target: str
    instance: str
    medium: str
    cached_blocks: int
    stored_blocks: int
    removed_blocks: int
    first_stores: int
    capacity_misses: int
    duplicate_stores: int
    unknown_removes: int
    overflow: int
    block_size: int
    pool_blocks: int
    pool_from: str  # "engine" (its stated capacity) or "peak_cached"
    stored_per_second: float | None = None
    removed_per_second: float | None = None
    capacity_misses_per_second: float | None = None
    hit_ratio: float | None = None
    curve: list[CurvePoint] = field(default_factory=list)
    hot_chains: list[HotChain] = field(default_factory=list)
    shared_blocks: int | None = None
    distances: dict = field(default_factory=dict)  # DistanceHistogram.to_dict()

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__slots__ if k not in ("curve", "hot_chains")}  # type: ignore[attr-defined]
        out["curve"] = [p.to_dict() for p in self.curve]
        out["hot_chains"] = [c.to_dict() for c in self.hot_chains]
        return out


class KvEventsHub:
    def __init__(
        self,
        sources: list[KvEventsSource],
        limits: Limits | None = None,
        window_s: float = 60.0,
        lookup: ScrapeLookup | None = None,
        notes: list[Note] | None = None,
    ) -> None:
        self.notes = list(notes or [])  # what `auto` found when the subscriptions were made
        self.states = [SourceState(s, limits) for s in sources]
        self.window_s = window_s
        self.lookup = lookup
        self.views: list[TierView] = []
        self.fleet_shared_blocks = 0
        self.ticks = 0
        self._history: dict[tuple[str, str, str], deque[_Snapshot]] = {}
        self._subscribers: list = []

    def start(self) -> None:
        """Start one subscriber thread per source (imports pyzmq)."""
        from exporter.kv_events.subscriber import Subscriber

        self._subscribers = [Subscriber(st).start() for st in self.states]

    def stop(self) -> None:
        for sub in self._subscribers:
            sub.stop()
        self._subscribers = []

    @property
    def subscribers(self) -> list:
        return list(self._subscribers)

    async def run(
        self, stop: asyncio.Event, interval_s: float, on_tick: Callable[[], None] | None = None
    ) -> None:
        while not stop.is_set():
            self.tick()
            if on_tick is not None:
                on_tick()
            try:
                await asyncio.wait_for(stop.wait(), interval_s)
            except asyncio.TimeoutError:
                pass

    def tick(self, now: float | None = None) -> list[TierView]:
        now = time.time() if now is None else now
        views: list[TierView] = []
        primaries: dict[tuple[str, str], Tier] = {}
        for st in self.states:
            with st.lock:
                for rank, inst in st.instances.items():
                    for medium, tier in inst.tiers.items():
                        views.append(self._view(st.source.name, rank, medium, tier, now))
                        if medium == PRIMARY:
                            primaries[(st.source.name, rank)] = tier
        # A lone replica shares nothing: 0, not unknown (it is the whole fleet the exporter sees).
        per, self.fleet_shared_blocks = shared_blocks(primaries) if len(primaries) > 1 else ({}, 0)
        for v in views:
            if v.medium == PRIMARY:
                v.shared_blocks = per.get((v.target, v.instance), 0)
        self.views = views
        self.ticks += 1
        return views

    def _view(self, name: str, rank: str, medium: str, tier: Tier, now: float) -> TierView:
        facts = self.lookup(name, rank, self.window_s) if self.lookup is not None else None
        if facts is not None and facts.capacity_blocks:
            tier.pool_blocks = int(facts.capacity_blocks)
        pool = tier.pool_blocks or max(1, tier.peak_cached)
        bs = tier.block_size or int(facts.block_size or 0) if facts is not None else tier.block_size
        snap = _Snapshot(
            now, tier.stored_blocks, tier.removed_blocks, tier.capacity_misses, dict(tier.curve.avoidable)
        )
        ring = self._history.setdefault((name, rank, medium), deque())
        ring.append(snap)
        while len(ring) > 2 and ring[0].t < now - self.window_s:
            ring.popleft()
        first = ring[0]
        span = snap.t - first.t
        view = TierView(
            name, rank, medium, len(tier.cached), tier.stored_blocks, tier.removed_blocks, tier.first_stores,
            tier.capacity_misses, tier.duplicate_stores, tier.unknown_removes, tier.overflow, bs, pool,
            "engine" if tier.pool_blocks else "peak_cached",
        )  # fmt: skip
        if span > 0:
            view.stored_per_second = (snap.stored - first.stored) / span
            view.removed_per_second = (snap.removed - first.removed) / span
            view.capacity_misses_per_second = (snap.misses - first.misses) / span
        q = facts.queried_tokens if facts is not None else None
        h = facts.hit_tokens if facts is not None else None
        if q and h is not None and medium == PRIMARY:
            view.hit_ratio = min(1.0, max(0.0, h / q))
        for f, total in snap.avoidable.items():
            gained = total - first.avoidable.get(f, 0)
            ratio = (
                projected_hit_ratio(q, h, gained, bs) if q and h is not None and medium == PRIMARY else None
            )
            saved = bs * gained / span if span > 0 else None
            view.curve.append(CurvePoint(f, extra_blocks(pool, f), total, ratio, saved))
        view.hot_chains = hot_chains(tier)
        view.distances = tier.distances.to_dict()
        return view

    def sources_view(self) -> list[dict]:
        """For /api/v1/kv_events: each source's connection and problem counters."""
        out = []
        for st in self.states:
            with st.lock:
                out.append(
                    {
                        "name": st.source.name,
                        "endpoint": st.source.endpoint,
                        "replay_endpoint": st.source.replay,
                        "topic": st.source.topic,
                        "bind": st.source.bind,
                        "connected": st.connected,
                        "disconnects": st.disconnects,
                        "last_message_unix": st.last_message_t,
                        "batches": st.stream.applied,
                        "replayed_batches": st.stream.replayed,
                        "missed_at_join": st.stream.missed_at_join,
                        "next_seq": st.stream.expected,
                        "problems": dict(st.problems),
                        "eras": sorted(st.eras),
                        "instances": sorted(st.instances),
                    }
                )
        return out
