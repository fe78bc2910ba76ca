"""The engine core: an `LLMEngine` (scheduler, KV manager, executor) behind the protocol.

It turns commands into engine calls and engine results into `SeqOutput`s, and nothing
else: no text (the API server detokenizes), no metrics (the server computes them from the
timings and the stats record), no transport (the core loop owns that).

Invariants: every choice that ends in the core produces exactly one final `SeqOutput` (its
finish_reason set), except choices the server finished itself (`stop_sequences`), which it
already knows about; a choice's `timing` is sent with its first output, its final one, and
whenever its preemption count changed, so the server's copy is always current.
"""

from __future__ import annotations

from reference_engine.core.messages import (
    AddRequest,
    CoreStats,
    Rejection,
    SeqOutput,
    SeqTiming,
)
from reference_engine.engine import LLMEngine, SequenceOutput
from reference_engine.request import Request, RequestStatus
from reference_engine.sampling_params import InvalidRequestError


def seq_timing(seq: Request) -> SeqTiming:
    return SeqTiming(
        seq.first_scheduled_time,
        seq.first_token_time,
        seq.finished_time,
        seq.num_preemptions,
        max(0, seq.num_cached_tokens),
    )


class EngineCore:
    """Owns `engine` (built with detokenize=False). Not thread-safe: one thread drives it."""

    def __init__(self, engine: LLMEngine):
        if engine.detokenize:
            raise ValueError("the engine core's engine must be built with detokenize=False")
        self.engine = engine
        self._sent_preemptions: dict[str, int] = {}  # sequence id -> count last reported
        # Requests that asked for prompt logprobs, until their first output carries them. Held
        # by reference: the group may finish (and leave the engine) in the step that sends them.
        self._prompt_logprobs: dict[str, dict] = {}

    def has_work(self) -> bool:
        return self.engine.has_unfinished()

    def add(self, command: AddRequest) -> Rejection | None:
        try:
            self.engine.add_request(
                command.prompt_token_ids, command.params, command.request_id, command.arrival_time
            )
        except InvalidRequestError as exc:
            return Rejection(command.request_id, str(exc), exc.param)
        if command.params.prompt_logprobs is not None:
            self._prompt_logprobs[command.request_id] = self.engine.groups[command.request_id].prompt_logprobs
        return None

    def abort(self, request_ids: list[str]) -> list[SeqOutput]:
        """Abort each request; returns the final output of every choice that was still running."""
        out = []
        for request_id in request_ids:
            group = self.engine.groups.get(request_id)
            if group is None or not self.engine.abort(request_id):
                continue
            self._prompt_logprobs.pop(request_id, None)
            for seq in group.sequences:
                if seq.status == RequestStatus.FINISHED_ABORTED:
                    self._sent_preemptions.pop(seq.request_id, None)
                    out.append(
                        SeqOutput(request_id, seq.index, finish_reason="abort", timing=seq_timing(seq))
                    )
        return out

    def stop_sequences(self, choices: list[tuple[str, int]]) -> None:
        for request_id, index in choices:
            group = self.engine.groups.get(request_id)
            if group is not None:
                for seq in group.sequences:
                    if seq.index == index:
                        self._sent_preemptions.pop(seq.request_id, None)
            self.engine.finish_sequence(request_id, index)

    def step(self) -> list[SeqOutput]:
        return [self._output(out) for out in self.engine.step()]

    def _output(self, out: SequenceOutput) -> SeqOutput:
        seq = out.request
        rid = seq.group_id
        first = seq.request_id not in self._sent_preemptions
        changed = self._sent_preemptions.get(seq.request_id) != seq.num_preemptions
        output = SeqOutput(rid, seq.index, out.new_token_ids, out.new_logprobs or None)
        prompt_logprobs = self._prompt_logprobs.pop(rid, None)
        if prompt_logprobs is not None:
            output.prompt_logprobs = dict(prompt_logprobs)
        if out.finished:
            output.finish_reason = out.finish_reason
            self._sent_preemptions.pop(seq.request_id, None)
        else:
            self._sent_preemptions[seq.request_id] = seq.num_preemptions
        if first or changed or out.finished:
            output.timing = seq_timing(seq)
        return output

    def stats(self, step_tokens: list[int]) -> CoreStats:
        engine, st = self.engine, self.engine.stats
        pool = engine.kv.pool
        return CoreStats(
            num_running=len(engine.scheduler.running),
            num_waiting=len(engine.scheduler.waiting),
            kv_usage=pool.usage(),
            num_free_blocks=pool.num_free_blocks,
            steps=st.steps,
            scheduled_tokens=st.scheduled_tokens,
            prompt_tokens=st.prompt_tokens,
            generation_tokens=st.generation_tokens,
            num_preemptions=st.num_preemptions,
            prefix_cache_queries=st.prefix_cache_queries,
            prefix_cache_hits=st.prefix_cache_hits,
            preempted_prefix_cache_queries=st.preempted_prefix_cache_queries,
            preempted_prefix_cache_hits=st.preempted_prefix_cache_hits,
            aborted=st.aborted,
            step_tokens=step_tokens,
            residency=st.take_residency(),
        )
