"""A ladder request whose usage was never seen above idle is sent once more (reads on a busy
machine can miss a short request's whole life); one that shows nothing twice stays unread and
the fit leaves it out. `observe` is replaced here by a function that answers from a known pool:
the timing that makes a real read miss cannot be produced on demand."""

from __future__ import annotations

import asyncio
import dataclasses

from harness.probe import live
from harness.probe.fit import fit_pool
from harness.probe.live import LiveSettings
from harness.probe.stated import StatedPool
from tests.harness.probe.observations import observed

USABLE, BLOCK, MAX_KV = 16, 128, 1023  # vLLM's CPU pool of the probe's real-server test


def climb(monkeypatch, unread: dict[int, int]) -> tuple[list, list[str], list[int]]:
    """The ladder's observations when rung i is read as idle its first unread[i] times."""
    truth = {(o.prompt_tokens, o.output_tokens): o for o in observed(USABLE, BLOCK, max_kv=MAX_KV)}
    sent: list[int] = []

    async def observe(session, target, model, rung, reader, rng, headers):
        i = list(truth).index((rung.prompt_tokens, rung.output_tokens))
        sent.append(i)
        o = truth[(rung.prompt_tokens, rung.output_tokens)]
        if sent.count(i) <= unread.get(i, 0):
            return dataclasses.replace(o, peak_usage=0.0, levels=(0.0,), readings=1)
        return o

    monkeypatch.setattr(live, "observe", observe)
    said: list[str] = []
    stated = StatedPool(num_blocks=USABLE + 1, block_size=BLOCK)
    settings = LiveSettings(target="http://stand-in", max_kv_tokens=MAX_KV)
    obs = asyncio.run(live._climb(None, settings, None, stated, "m", {}, said.append))
    return obs, said, sent


def test_a_request_read_as_idle_is_sent_again_and_measured(monkeypatch):
    obs, said, sent = climb(monkeypatch, {4: 1})
    assert sent == [0, 1, 2, 3, 4, 4]
    assert sum("sending it again" in line for line in said) == 1
    fit = fit_pool(obs, StatedPool(num_blocks=USABLE + 1, block_size=BLOCK))
    assert (fit.usable_blocks, fit.tokens_per_block) == (USABLE, BLOCK)
    assert fit.usable_blocks_source.startswith("measured")


def test_a_request_read_as_idle_twice_is_left_out(monkeypatch):
    obs, _, sent = climb(monkeypatch, {4: 2})
    assert sent == [0, 1, 2, 3, 4, 4] and not obs[4].peak_usage
    fit = fit_pool(obs, StatedPool(num_blocks=USABLE + 1, block_size=BLOCK))
    assert "usage_never_rose" in [f.code for f in fit.findings]
    # the one rung that climbs a 128-token block mid-decode is gone: the pool is only stated now
    assert fit.usable_blocks_source.startswith("stated"), fit.usable_blocks_source
