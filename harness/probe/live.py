"""A live probe of one server: what it states, the ladder of lone requests, the fit, the
comparison with the statement and the concurrency table, as one `ProbeResult`.

The ladder stays within what one request may hold: max_model_len - 1 tokens, nine tenths of
the stated pool (a lone request the pool cannot hold is preempted, and its occupancy is not
its cost), a llama.cpp slot's context, and `max_kv_tokens`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from exporter.dialects.probe import KVLayout
from harness.bundle.finding import Finding
from harness.probe.assemble import finish
from harness.probe.ladder import DEFAULT_MAX_KV_TOKENS, Rung, ladder
from harness.probe.lone_request import observe
from harness.probe.observation import RequestObservation
from harness.probe.reader import PoolReader, ReadError
from harness.probe.result import ProbeResult
from harness.probe.stated import StatedPool, model_card, slot_contexts, stated_pool

POOL_SHARE = 0.9
IDLE_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class LiveSettings:
    target: str
    model: str | None = None
    api_key: str = field(default="", repr=False)
    kv_layout: KVLayout = "auto"
    max_kv_tokens: int = DEFAULT_MAX_KV_TOKENS
    seed: int = 0
    lengths: tuple[tuple[str, int], ...] = ()
    lengths_source: str = ""


def probe_limit(stated: StatedPool, cap: int) -> int:
    """The most KV tokens one ladder request may hold."""
    limits = [cap]
    if stated.max_model_len:
        limits.append(stated.max_model_len - 1)
    if stated.slots and stated.slot_layout != "unified":
        limits.append(min(stated.slots) - 1)
    elif stated.capacity_tokens:
        limits.append(int(stated.capacity_tokens * POOL_SHARE))
    return max(min(limits), 0)


def retained_usage(obs: list[RequestObservation]) -> Finding | None:
    first = next((o.idle_before for o in obs if o.idle_before is not None), None)
    last = next((o.idle_after for o in reversed(obs) if o.idle_after is not None), None)
    if first is None or last is None or last <= first + IDLE_EPS:
        return None
    return Finding(
        "idle_usage_retained",
        f"usage stayed at {last:.2%} after the probe's requests ended (it was {first:.2%} before): the "
        "server counts blocks no request holds (its cache) as used; each request was measured from "
        "the level just before it",
    )


async def probe_live(settings: LiveSettings, say: Callable[[str], None] = lambda _m: None) -> ProbeResult:
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    async with aiohttp.ClientSession() as session:
        reader = PoolReader(session, settings.target, headers, settings.kv_layout)
        try:
            first = await reader.read()
        except ReadError as exc:
            note = Finding("target_unreachable", f"{settings.target}: {exc}")
            return finish(
                settings.target, StatedPool(), [], [note], settings.lengths, settings.lengths_source
            )
        models = await _json(session, settings.target + "/v1/models", headers)
        card = model_card(models, settings.model)
        slots = reader.reply_body("/slots")
        layout = reader.slot_layout(slot_contexts(slots))
        stated = stated_pool(reader.dialect, reader.exposition, card, slots, layout)  # type: ignore[arg-type]
        if first.usage is None:
            note = Finding(
                "no_kv_usage_metric",
                f"the server ({reader.dialect or 'unknown dialect'}) exposes no KV usage: "
                + ("; ".join(reader.notes) or "no KV usage metric")
                + "; blocks per request cannot be measured",
            )
            return finish(settings.target, stated, [], [note], settings.lengths, settings.lengths_source)
        model = settings.model or str(card.get("id") or "")
        obs = await _climb(session, settings, reader, stated, model, headers, say)
        retained = retained_usage(obs)
        notes = [retained] if retained else []
        return finish(settings.target, stated, obs, notes, settings.lengths, settings.lengths_source)


async def _climb(
    session: aiohttp.ClientSession,
    settings: LiveSettings,
    reader: PoolReader,
    stated: StatedPool,
    model: str,
    headers: dict[str, str],
    say: Callable[[str], None],
) -> list[RequestObservation]:
    """The ladder's requests, one at a time, each observed alone. A request whose usage was
    never seen above idle is sent once more: on a busy machine the reads can miss a short
    request's whole life, and with 128-token blocks only one rung climbs a block mid-decode,
    the step the pool's block count is read from."""
    rungs = ladder(probe_limit(stated, settings.max_kv_tokens))
    rng = random.Random(settings.seed)
    obs: list[RequestObservation] = []
    for i, rung in enumerate(rungs):
        say(f"request {i + 1}/{len(rungs)}: prompt {rung.prompt_tokens} + output {rung.output_tokens}")
        o = await _observe(session, settings, reader, model, rung, rng, headers)
        if o.unread:
            say(f"  usage never rose over {o.readings} readings; sending it again")
            o = await _observe(session, settings, reader, model, rung, rng, headers)
        obs.append(o)
        failed = f"; {o.error}" if o.error else ""
        say(f"  peak usage {(o.peak_usage or 0):.4%} over {o.readings} readings{failed}")
    return obs


async def _observe(
    session: aiohttp.ClientSession,
    settings: LiveSettings,
    reader: PoolReader,
    model: str,
    rung: Rung,
    rng: random.Random,
    headers: dict[str, str],
) -> RequestObservation:
    """`observe`, with a pool that could not be read recorded as the request's error."""
    try:
        return await observe(session, settings.target, model, rung, reader, rng, headers)
    except ReadError as exc:
        tokens = (rung.prompt_tokens, rung.output_tokens)
        return RequestObservation(*tokens, *tokens, error=str(exc))


async def _json(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> object:
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(10)) as resp:
            return await resp.json(content_type=None) if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
