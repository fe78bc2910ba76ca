"""Replay a JSON-lines trace of arrival times and prompt/output lengths (see harness/workload/traces.py).

Requests leave at the trace's times (scaled by --time-scale), open loop. Mooncake-style
`hash_ids` become shared blocks of prompt text, so the trace's prefix reuse is reproduced.

    locust -f loadtests/replay.py --host URL -u 64 -r 64 --trace trace.jsonl --time-scale 0.5
"""

from __future__ import annotations

import random

from harness.load import (
    MOONCAKE_BLOCK_TOKENS,
    LLMUser,
    RequestSpec,
    Slot,
    TraceEntry,
    load_trace,
    register_workload,
    trace_offsets,
    words,
)

register_workload("replay")
BLOCK_SEED_BASE = 2_000_003


class ReplayUser(LLMUser):
    workload = "replay"

    def offsets(self):
        path = self.option("trace")
        if not path:
            raise ValueError("the replay workload needs --trace FILE")
        return trace_offsets(load_trace(path), float(self.option("time_scale")))

    def request_for_slot(self, slot: Slot) -> RequestSpec:
        entry: TraceEntry = slot.payload
        prompt, output = self.fit_lengths(entry.prompt_tokens, entry.output_tokens)
        total = self.calibration.words_for(prompt)
        per_block = self.calibration.words_for(MOONCAKE_BLOCK_TOKENS, include_overhead=False)
        parts: list[str] = []
        for h in entry.hash_ids:  # shared blocks first, as a prefix
            if len(parts) >= total:
                break
            parts += words(random.Random(BLOCK_SEED_BASE + h), per_block)
        parts = parts[:total] + words(self.rng, total - len(parts))
        return RequestSpec(
            prompt=" ".join(parts),
            max_tokens=output,
            target_prompt_tokens=prompt,
            target_output_tokens=output,
            prefix_id=entry.hash_ids[0] if entry.hash_ids else None,
        )

    def next_request(self) -> RequestSpec:  # never called: replay is always scheduled
        raise RuntimeError("replay requests come from the trace schedule")
