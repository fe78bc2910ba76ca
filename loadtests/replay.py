"""Replay a request trace: JSON lines (kvscope's or Mooncake's) or the Azure LLM inference
trace CSV (see harness/workload/traces.py).

Requests leave at the trace's times (scaled by --time-scale), open loop. Mooncake-style
`hash_ids` become blocks of prompt text, the same in every request that names the id, so the
trace's prefix reuse is reproduced; the text depends on the run's --seed too, so a rerun
with another seed does not find the last run's blocks in the server's cache.

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

    def next_request(self) -> RequestSpec:  # never called: replay is always scheduled
        raise RuntimeError("replay requests come from the trace schedule")
