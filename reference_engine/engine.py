"""The engine loop: add requests, step, abort; sampling results become sequence outputs.

Torch-free on purpose: the forward pass sits behind an `Executor`, so the same engine
(scheduler, block pool, stop handling, statistics) runs the real model or the simulator's
cost model.

`detokenize=False` is the engine core's mode (`reference_engine.core`): outputs carry token
ids only and stop strings are not looked for, because the API server detokenizes and tells
the core (`finish_sequence`) when a choice hit a stop string, as vLLM V1 splits it. The
default keeps text and stop strings here, for in-process use (`generate`).

Time: the engine is built with one `Clock` (`reference_engine.clock`; the host's monotonic
clock unless given) and hands it to the scheduler and the residency tracker, so every stamp a
request carries lies on one axis: wall time when serving, modelled time in a replay.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from reference_engine.admission import AdmissionLimits, check_admission
from reference_engine.clock import HOST_CLOCK, Clock
from reference_engine.config import AllocatorMode, EngineConfig
from reference_engine.detokenizer import IncrementalDetokenizer
from reference_engine.engine_stats import EngineStats
from reference_engine.kv_events.config import KVEventsConfig
from reference_engine.kv_events.events import KVEventBatch
from reference_engine.kv_manager import KVCacheManager, cdiv
from reference_engine.kv_residency import KVResidencyTracker
from reference_engine.request import Request, RequestStatus
from reference_engine.sampling_params import InvalidRequestError, SamplingParams
from reference_engine.scheduler import Scheduler, SchedulerLimits
from reference_engine.scheduler_output import SchedulerOutput


@dataclass(slots=True)
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass(slots=True)
class StepResult:
    """What an executor returns for one step.

    `sampled[rid]`: tokens for each chunk with samples=True (n of them for a request's
    first sample when it asks for n > 1). `logprobs[rid]`: one entry per sampled token.
    `prompt_logprobs[rid]`: {position: logprob of prompt token at that position}.
    """

    sampled: dict[str, list[int]]
    logprobs: dict[str, list[TokenLogprob]] = field(default_factory=dict)
    prompt_logprobs: dict[str, dict[int, TokenLogprob]] = field(default_factory=dict)


class Executor(Protocol):
    def execute(self, out: SchedulerOutput) -> StepResult: ...


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def decode(self, token_ids: list[int]) -> str: ...


@dataclass(slots=True)
class SequenceOutput:
    """News about one sequence (one choice) after a step."""

    request: Request
    new_token_ids: list[int]
    new_text: str
    new_logprobs: list[TokenLogprob]
    finished: bool
    finish_reason: str | None = None

    @property
    def index(self) -> int:
        return self.request.index


@dataclass(slots=True)
class GenerationResult:
    request_id: str
    prompt_token_ids: list[int]
    choices: list[Request]
    texts: list[str]
    prompt_logprobs: dict[int, TokenLogprob]


@dataclass(slots=True)
class _Group:
    """All sequences of one API request (n choices) and their text state."""

    sequences: list[Request]
    detokenizers: dict[str, IncrementalDetokenizer]
    prompt_logprobs: dict[int, TokenLogprob] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return len(self.sequences) == self.sequences[0].sampling_params.n and all(
            s.is_finished for s in self.sequences
        )


def reservation_policy(allocator: AllocatorMode, max_model_len: int) -> Callable[[Request], int] | None:
    """Tokens a request reserves at admission under a contiguous allocator (None: paged)."""
    if allocator == "contiguous":
        return lambda request: max_model_len
    if allocator == "contiguous-oracle":
        return lambda request: min(
            request.num_prompt_tokens + request.sampling_params.max_tokens, max_model_len
        )
    return None


class LLMEngine:
    def __init__(
        self,
        *,
        executor: Executor,
        tokenizer: Tokenizer,
        num_blocks: int,
        block_size: int,
        max_model_len: int,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        enable_prefix_caching: bool,
        allocator: AllocatorMode,
        watermark: float,
        eos_token_ids: tuple[int, ...],
        vocab_size: int,
        clock: Clock = HOST_CLOCK,
        detokenize: bool = True,
        kv_events: KVEventsConfig | None = None,
        kv_cache_metrics_sample: float | None = None,
    ):
        """`kv_events`: publish the block pool's KV events with vLLM's ZeroMQ publisher (one
        batch per step that produced events); call `close()` to stop it.
        `kv_cache_metrics_sample`: track that share of block allocations for the residency
        histograms (`EngineStats.take_residency`); None: off."""
        self.executor = executor
        self.detokenize = detokenize
        self.allocator = allocator
        self.tokenizer = tokenizer
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.eos_token_ids = eos_token_ids
        self.vocab_size = vocab_size
        self.clock = clock
        self.kv = KVCacheManager(
            num_blocks,
            block_size,
            enable_prefix_caching,
            reservation=reservation_policy(allocator, max_model_len),
            watermark_blocks=int(watermark * num_blocks),
            enable_kv_events=kv_events is not None,
            residency=None
            if kv_cache_metrics_sample is None
            else KVResidencyTracker(kv_cache_metrics_sample, clock.now),
        )
        if allocator == "contiguous" and cdiv(max_model_len, block_size) > self.kv.usable_blocks:
            raise InvalidRequestError(
                f"KV pool too small for even one request: contiguous allocation reserves "
                f"{cdiv(max_model_len, block_size)} blocks per request but only {self.kv.usable_blocks} exist"
            )
        self.scheduler = Scheduler(
            SchedulerLimits(max_num_seqs, max_num_batched_tokens, max_model_len), self.kv, clock
        )
        self.limits = AdmissionLimits(max_model_len, vocab_size, block_size, self.kv.usable_blocks)
        self.groups: dict[str, _Group] = {}
        self.stats = EngineStats(num_blocks=num_blocks, block_size=block_size)
        self._ids = itertools.count()
        self.kv_event_publisher = None
        self.kv_events_published = 0  # batches handed to the publisher
        if kv_events is not None:
            from reference_engine.kv_events.publisher import ZmqEventPublisher

            self.kv_event_publisher = ZmqEventPublisher(kv_events)

    # -- admission -------------------------------------------------------------------

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str | None = None,
        arrival_time: float | None = None,
    ) -> Request:
        """Validate and queue a request. Raises InvalidRequestError and changes nothing on bad input."""
        params.validate()
        request_id = request_id or f"req-{next(self._ids)}"
        if request_id in self.groups:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        token_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        check_admission(token_ids, params, self.limits)
        request = Request(
            request_id=request_id,
            token_ids=token_ids,
            num_prompt_tokens=len(token_ids),
            sampling_params=params,
            arrival_time=self.clock.now() if arrival_time is None else arrival_time,
            eos_token_ids=self.eos_token_ids,
        )
        detokenizers = {request_id: self._detokenizer(params)} if self.detokenize else {}
        self.groups[request_id] = _Group([request], detokenizers)
        self.scheduler.add_request(request)
        return request

    def _detokenizer(self, params: SamplingParams) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self.tokenizer.decode, list(params.stop))

    # -- the loop ----------------------------------------------------------------------

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[SequenceOutput]:
        out = self.scheduler.schedule()
        self.stats.record_schedule(out, self.scheduler, self.kv)
        if out.is_empty:
            return []
        result = self.executor.execute(out)
        self.scheduler.update_from_output(out, result.sampled)
        self._publish_kv_events()
        now = self.clock.now()
        outputs: list[SequenceOutput] = []
        for chunk in out.chunks:
            request = chunk.request
            group = self.groups.get(request.group_id)
            if group is None or request.is_finished:
                continue
            for pos, lp in result.prompt_logprobs.get(request.request_id, {}).items():
                group.prompt_logprobs.setdefault(pos, lp)
            if not chunk.samples:
                continue
            tokens = result.sampled[request.request_id]
            logprobs = result.logprobs.get(request.request_id, [])
            if request.first_token_time is None:
                request.first_token_time = now
            self.stats.generation_tokens += len(tokens)
            if request.num_output_tokens == 1 and request.index == 0:
                self.stats.prompt_tokens += request.num_prompt_tokens
                self._fork_siblings(request, group, tokens[1:], logprobs[1:])
                outputs.extend(
                    self._emit(s, group, [s.token_ids[-1]], logprobs[s.index : s.index + 1])
                    for s in group.sequences[1:]
                )
            outputs.append(self._emit(request, group, [tokens[0]], logprobs[:1]))
        self._drop_finished_groups()
        return outputs

    def _fork_siblings(
        self, parent: Request, group: _Group, tokens: list[int], logprobs: list[TokenLogprob]
    ) -> None:
        for i, token in enumerate(tokens, start=1):
            child = Request(
                request_id=f"{parent.request_id}#{i}",
                token_ids=parent.token_ids[:-1] + [token],
                num_prompt_tokens=parent.num_prompt_tokens,
                sampling_params=parent.sampling_params,
                arrival_time=parent.arrival_time,
                group_id=parent.group_id,
                index=i,
                num_cached_tokens=parent.num_cached_tokens,
                eos_token_ids=parent.eos_token_ids,
                first_token_time=parent.first_token_time,
            )
            self.scheduler.fork(parent, child)
            group.sequences.append(child)
            if self.detokenize:
                group.detokenizers[child.request_id] = self._detokenizer(parent.sampling_params)

    def _emit(
        self, seq: Request, group: _Group, new_tokens: list[int], logprobs: list[TokenLogprob]
    ) -> SequenceOutput:
        reason = self._finish_reason(seq, new_tokens[-1])
        text = ""
        if self.detokenize:
            detok = group.detokenizers[seq.request_id]
            detok.add(new_tokens)
            cut = detok.find_stop()
            if cut >= 0:
                reason = "stop"
            text = detok.take(final=reason is not None, cut=cut)
        if reason is not None:
            self.scheduler.finish(seq, RequestStatus(reason))
        return SequenceOutput(seq, new_tokens, text, logprobs, reason is not None, reason)

    def _finish_reason(self, seq: Request, token: int) -> str | None:
        params = seq.sampling_params
        if not params.ignore_eos and token in seq.eos_token_ids and seq.num_output_tokens > params.min_tokens:
            return "stop"
        if seq.num_output_tokens >= params.max_tokens or seq.num_tokens >= self.max_model_len:
            return "length"
        return None

    def _drop_finished_groups(self) -> None:
        for gid in [gid for gid, g in self.groups.items() if g.finished]:
            del self.groups[gid]

    def finish_sequence(self, request_id: str, index: int) -> bool:
        """Finish one choice as stopped and free its blocks now (the API server found a stop
        string in its text). False if the request or the choice is no longer running."""
        group = self.groups.get(request_id)
        seq = next((s for s in group.sequences if s.index == index), None) if group else None
        if seq is None or seq.is_finished:
            return False
        self.scheduler.finish(seq, RequestStatus.FINISHED_STOPPED)
        if group.finished:
            del self.groups[request_id]
        return True

    def _publish_kv_events(self) -> None:
        """What the pool recorded this step (evictions while scheduling, stores after it), as
        one batch, like vLLM's scheduler at the end of `update_from_output`."""
        if self.kv_event_publisher is not None:
            events = self.kv.pool.take_events()
            if events:
                # The wire's `ts` is Unix time, as vLLM's; subscribers date batches by it.
                self.kv_event_publisher.publish(KVEventBatch(ts=time.time(), events=events))
                self.kv_events_published += 1

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block (AllBlocksCleared); False while any request holds blocks."""
        done = self.kv.pool.reset_prefix_cache()
        self._publish_kv_events()
        return done

    def close(self) -> None:
        """Stop the KV event publisher (sending what is queued). The engine can still step."""
        if self.kv_event_publisher is not None:
            self.kv_event_publisher.shutdown()
            self.kv_event_publisher = None

    def abort(self, request_id: str) -> bool:
        """Abort every sequence of a request and free its blocks now. False if unknown."""
        group = self.groups.pop(request_id, None)
        if group is None:
            return False
        for seq in group.sequences:
            self.scheduler.finish(seq, RequestStatus.FINISHED_ABORTED)
        self.stats.aborted += 1
        return True

    def generate(self, prompts: list[str | list[int]], params: SamplingParams) -> list[GenerationResult]:
        """Run prompts to completion (the convenience API); results in prompt order."""
        pending = {self.add_request(p, params).request_id: i for i, p in enumerate(prompts)}
        groups = {rid: self.groups[rid] for rid in pending}
        while any(not g.finished for g in groups.values()):
            self.step()
        results = []
        for rid, group in groups.items():
            seqs = sorted(group.sequences, key=lambda s: s.index)
            texts = [
                group.detokenizers[s.request_id].final_text(group.detokenizers[s.request_id].find_stop())
                for s in seqs
            ]
            results.append(
                GenerationResult(rid, seqs[0].prompt_token_ids, seqs, texts, group.prompt_logprobs)
            )
        return results


def engine_from_config(
    config: EngineConfig,
    executor: Executor,
    tokenizer: Tokenizer,
    num_blocks: int,
    max_model_len: int,
    vocab_size: int,
    detokenize: bool = True,
    clock: Clock = HOST_CLOCK,
) -> LLMEngine:
    """An engine with `config`'s scheduler, cache and KV-event settings over `executor` (a
    model's or the simulator's), on a pool of `num_blocks` already sized for it, stamping time
    on `clock` (the executor's, for the simulator)."""
    eos = tuple(tokenizer.eos_token_ids)
    return LLMEngine(
        executor=executor,
        tokenizer=tokenizer,
        num_blocks=num_blocks,
        block_size=config.block_size,
        max_model_len=max_model_len,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        enable_prefix_caching=config.enable_prefix_caching,
        allocator=config.allocator,
        watermark=config.watermark,
        eos_token_ids=eos,
        vocab_size=vocab_size,
        clock=clock,
        detokenize=detokenize,
        kv_events=config.kv_events(),
        kv_cache_metrics_sample=config.residency_sample_rate,
    )
