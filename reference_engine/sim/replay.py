"""Replay a request trace on the simulator against a virtual clock.

The real scheduler and block pool run unchanged; only time is virtual: each step advances
the clock by the cost model's step time, and idle gaps jump to the next arrival. A trace
of an hour replays in seconds, which is what the advisor's what-if checks and the
PagedAttention reproduction need. The engine is built on the replay's clock, so every stamp a
record carries (arrival, first scheduling, first token, finish) is virtual time.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field, replace

from reference_engine.clock import VirtualClock
from reference_engine.config import EngineConfig
from reference_engine.sampling_params import InvalidRequestError, SamplingParams
from reference_engine.sim.arrivals import Arrivals
from reference_engine.sim.cost_model import StepTimeModel
from reference_engine.sim.engine import SimSpec, build_sim_engine
from reference_engine.sim.executor import drawn_token

SHARE_EVERY = 8
VOCAB = range(1000, 60_000)
STREAM_SEEDS = 1 << 48
# Virtual time publishes a whole trace's KV events in about a second of wall time; the
# replay waits for them to be sent before the publisher (and its replay socket) closes.
EVENTS_DRAIN_S = 60.0
log = logging.getLogger("kvscope.sim")


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace. Requests with the same `prefix_group` (>= 0) start with the
    same `prefix_tokens` token ids, as a shared system prompt would. Requests with the same
    `chain` (>= 0) are one closed-loop user's, in arrival order: each after the first arrives
    `after_s` after the previous one finished in the replay (`arrivals`), not at `arrival_s`.

    A conversation (`answer_continues`): its answer's tokens continue its group's token
    stream, so the next turn, whose prompt is the group's stream up to past that answer,
    finds the answer's blocks cached as a server finds the history it served. Its first
    `stem_tokens` come from `stem_group`'s stream instead (a system prompt or preamble shared
    with other conversations). A group's stream is position-addressed: token p is the same
    whichever request carries it."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    n: int = 1
    prefix_group: int = -1
    prefix_tokens: int = 0
    chain: int = -1
    after_s: float = 0.0
    stem_group: int = -1
    stem_tokens: int = 0
    answer_continues: bool = False


@dataclass(slots=True)
class ReplayRecord:
    """One request's replay, stamped in virtual seconds by the engine (for n > 1: the first
    choice's scheduling and first token, the last choice's finish)."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None
    num_preemptions: int = 0
    cached_tokens: int = 0
    index: int = -1  # the request's place in the trace

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s


@dataclass(slots=True)
class ReplayResult:
    records: list[ReplayRecord]
    rejected: int
    duration_s: float
    steps: int
    num_blocks: int
    block_size: int
    num_preemptions: int = 0
    max_running: int = 0
    peak_kv_usage: float = 0.0
    token_state_share: float = 0.0  # time-weighted share of allocated KV slots holding tokens
    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    computed_tokens: int = 0  # tokens the model computed (prefill, recompute and decode)
    output_tokens: int = 0
    kv_event_batches: int = 0  # batches published (with kv_events_config)
    notes: list[str] = field(default_factory=list)

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.duration_s if self.duration_s else 0.0

    @property
    def requests_per_s(self) -> float:
        return len(self.records) / self.duration_s if self.duration_s else 0.0


class NullTokenizer:
    """Replays need token counts, not text; skipping detokenization keeps them fast."""

    eos_token_ids: tuple[int, ...] = ()
    vocab_size = 1 << 17

    def encode(self, text: str) -> list[int]:
        raise ValueError("replay traces carry token counts, not text")

    def decode(self, token_ids: list[int]) -> str:
        return ""


def stream_seed(group: int) -> int:
    """The seed of a prefix group's token stream (far above any request's own seed)."""
    return STREAM_SEEDS + group


def _prompt_ids(req: TraceRequest, index: int, rng: random.Random) -> list[int]:
    shared = []
    if req.prefix_group >= 0 and req.prefix_tokens > 0:
        stem = min(req.stem_tokens, req.prefix_tokens) if req.stem_group >= 0 else 0
        seeds = [stream_seed(req.stem_group)] * stem + [stream_seed(req.prefix_group)] * (
            min(req.prefix_tokens, req.prompt_tokens) - stem
        )
        shared = [drawn_token(seed, 0, p, VOCAB) for p, seed in enumerate(seeds)]
    return shared + [rng.randrange(1000, 60_000) for _ in range(req.prompt_tokens - len(shared))]


def replay_trace(
    trace: list[TraceRequest],
    spec: SimSpec,
    config: EngineConfig,
    seed: int = 0,
    step_cost: StepTimeModel | None = None,
    kv_events_config: str | None = None,
) -> ReplayResult:
    """`step_cost` replaces the catalogue's cost model for the step times (see
    `build_sim_engine`). `kv_events_config` (the flag's JSON): publish the replay's KV events,
    as a run of the same trace would. Otherwise a replay publishes none, whatever `config` says
    (a run's own --kv-events-config would bind the live engine's ports again), and keeps no
    residency histograms."""
    clock = VirtualClock()
    config = replace(config, kv_events_config=kv_events_config, kv_cache_metrics=False)
    sim = build_sim_engine(
        spec, config, tokenizer=NullTokenizer(), vocab=VOCAB, step_cost=step_cost, clock=clock
    )
    engine, kv = sim.engine, sim.engine.kv
    rng = random.Random(seed)
    arrivals = Arrivals(trace)
    result = ReplayResult([], 0, 0.0, 0, sim.num_blocks, config.block_size)
    live: dict[str, tuple[int, ReplayRecord]] = {}
    # The token-state share is sampled every SHARE_EVERY steps (walking every block each step
    # dominated replay time) and weighted by the busy time since the last sample; idle gaps
    # between arrivals hold no KV and carry no weight.
    weighted_share = busy = pending_weight = 0.0
    while arrivals or engine.has_unfinished():
        for at, i in arrivals.due(clock.t):
            req = trace[i]
            answer_seed = stream_seed(req.prefix_group) if req.answer_continues else seed + i
            params = SamplingParams(max_tokens=req.output_tokens, n=req.n, ignore_eos=True, seed=answer_seed)
            try:
                r = engine.add_request(_prompt_ids(req, i, rng), params, request_id=f"t{i}", arrival_time=at)
            except InvalidRequestError:
                result.rejected += 1
                arrivals.done(i, clock.t)
                continue
            live[r.request_id] = (i, ReplayRecord(at, req.prompt_tokens, 0, index=i))
        if not engine.has_unfinished():
            due = arrivals.next_time()
            if due is None:  # nothing running and nothing released: the replay is over
                break
            clock.advance_to(due)
            continue
        before = clock.t
        outputs = engine.step()
        pending_weight += clock.t - before
        if engine.stats.steps % SHARE_EVERY == 0 or not engine.has_unfinished():
            weighted_share += token_state_share(engine.scheduler.running, kv) * pending_weight
            busy += pending_weight
            pending_weight = 0.0
        result.max_running = max(result.max_running, len(engine.scheduler.running))
        result.computed_tokens += engine.stats.last_step_tokens
        for out in outputs:
            entry = live.get(out.request.group_id)
            if entry is None:
                continue
            index, rec = entry
            rec.output_tokens += len(out.new_token_ids)
            if rec.first_token_s is None:
                rec.first_scheduled_s = out.request.first_scheduled_time
                rec.first_token_s = out.request.first_token_time
            rec.num_preemptions = max(rec.num_preemptions, out.request.num_preemptions)
            rec.cached_tokens = max(rec.cached_tokens, out.request.num_cached_tokens)
            if out.finished and out.request.group_id not in engine.groups:
                rec.finished_s = out.request.finished_time
                result.records.append(rec)
                del live[out.request.group_id]
                arrivals.done(index, clock.t)
    if engine.kv_event_publisher is not None and not engine.kv_event_publisher.drain(EVENTS_DRAIN_S):
        log.warning("replay: KV events still unsent after %.0f s", EVENTS_DRAIN_S)
    engine.close()
    stats = engine.stats
    result.kv_event_batches = engine.kv_events_published
    result.duration_s = clock.t
    result.steps = stats.steps
    result.num_preemptions = stats.num_preemptions
    result.peak_kv_usage = stats.peak_kv_usage
    result.token_state_share = weighted_share / busy if busy else 0.0
    result.prefix_cache_queries, result.prefix_cache_hits = (
        stats.prefix_cache_queries,
        stats.prefix_cache_hits,
    )
    result.output_tokens = sum(r.output_tokens for r in result.records)
    return result


def token_state_share(running, kv) -> float:
    """Tokens whose KV is stored, over the slots of every allocated block (shared blocks once)."""
    filled: dict[int, int] = {}
    bs = kv.block_size
    for request in running:
        for i, block_id in enumerate(kv.req_block_ids.get(request.request_id, ())):
            tokens = max(0, min(bs, request.num_computed_tokens - i * bs))
            filled[block_id] = max(filled.get(block_id, 0), tokens)
    allocated = len(filled) * bs
    return sum(filled.values()) / allocated if allocated else 0.0
