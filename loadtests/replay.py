"""Replay a request trace: JSON lines (kvscope's or Mooncake's) or the Azure LLM inference
trace CSV (see harness/workload/traces.py).

Requests leave at the trace's times (scaled by --time-scale), open loop. Mooncake-style
`hash_ids` become blocks of prompt text, the same in every request that names the id, so the
trace's prefix reuse is reproduced; the text depends on the run's --seed too, so a rerun
with another seed does not find the last run's blocks in the server's cache. Lines with a
`session_id` are turns of a conversation: each is sent at its time but not before the
session's previous turn has its answer, with the whole conversation so far, the server's
answers included (harness/load/trace_sessions.py).

    locust -f loadtests/replay.py --host URL -u 64 -r 64 --trace trace.jsonl --time-scale 0.5
"""

from __future__ import annotations

import random

from harness.load import (
    MOONCAKE_BLOCK_TOKENS,
    LLMUser,
    RequestRecord,
    RequestSpec,
    Slot,
    TraceEntry,
    TraceSession,
    TraceSessions,
    close_trace_turn,
    load_trace,
    next_messages,
    register_workload,
    trace_offsets,
    words,
)

register_workload("replay")


class ReplayUser(LLMUser):
    workload = "replay"
    keeps_answer = True  # a session's answers go into its next turns
    replaying: TraceSession | None = None  # the session whose turn this user has in flight

    def offsets(self):
        path = self.option("trace")
        if not path:
            raise ValueError("the replay workload needs --trace FILE")
        entries = load_trace(path)
        self.ctx.cache["trace_sessions"] = TraceSessions.of(entries)
        return trace_offsets(entries, float(self.option("time_scale")))

    def request_for_slot(self, slot: Slot) -> RequestSpec | None:
        entry: TraceEntry = slot.payload
        if entry.session_id is not None:
            return self.session_turn(entry)
        prompt, output = self.fit_lengths(entry.prompt_tokens, entry.output_tokens)
        total = self.calibration.words_for(prompt)
        per_block = self.calibration.words_for(MOONCAKE_BLOCK_TOKENS, include_overhead=False)
        parts: list[str] = []
        seed = self.ctx.opts.seed
        for h in entry.hash_ids:  # shared blocks first, as a prefix
            if len(parts) >= total:
                break
            parts += words(random.Random(f"block:{seed}:{h}"), per_block)
        parts = parts[:total] + words(self.rng, total - len(parts))
        return RequestSpec(
            prompt=" ".join(parts),
            max_tokens=output,
            target_prompt_tokens=prompt,
            target_output_tokens=output,
            prefix_id=entry.hash_ids[0] if entry.hash_ids else None,
        )

    def session_turn(self, entry: TraceEntry) -> RequestSpec | None:
        """The entry's turn, once its session's earlier turns have ended (None: the run ended)."""
        state = self.ctx.cache["trace_sessions"].wait_for_turn(entry, lambda: self.ctx.draining)
        if state is None:
            return None
        _, output = self.fit_lengths(entry.prompt_tokens, entry.output_tokens)
        messages, target = next_messages(state, entry, self.calibration, self.rng, output)
        self.replaying = state
        return RequestSpec(
            prompt="",
            messages=messages,
            max_tokens=output,
            target_prompt_tokens=target,
            target_output_tokens=output,
        )

    def finished(self, spec: RequestSpec, rec: RequestRecord, answer: str | None) -> None:
        state, self.replaying = self.replaying, None
        if state is not None and spec.messages is not None:
            close_trace_turn(state, rec, answer)

    def next_request(self) -> RequestSpec:  # never called: replay is always scheduled
        raise RuntimeError("replay requests come from the trace schedule")
