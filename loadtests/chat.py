"""Chat with ShareGPT-like prompt and output lengths (or the lengths of a ShareGPT file).

locust -f loadtests/chat.py --host http://127.0.0.1:8000
locust -f loadtests/chat.py --host URL --dataset ShareGPT_V3_unfiltered_cleaned_split.json
"""

from __future__ import annotations

from harness.load import (
    MAX_TOTAL,
    LLMUser,
    RequestSpec,
    load_sharegpt,
    pick,
    register_workload,
    sharegpt_like,
    text,
)

register_workload("chat")


class ChatUser(LLMUser):
    workload = "chat"

    def next_request(self) -> RequestSpec:
        path = self.option("dataset")
        if path and "dataset" not in self.ctx.cache:
            self.ctx.cache["dataset"] = load_sharegpt(path)
        limit = (self.ctx.server.max_model_len if self.ctx.server else None) or MAX_TOTAL
        pair = pick(self.rng, self.ctx.cache["dataset"], limit) if path else sharegpt_like(self.rng, limit)
        prompt, output = self.fit_lengths(
            min(pair.prompt_tokens, self.option("max_prompt_tokens")),
            min(pair.output_tokens, self.option("max_output_tokens")),
        )
        return RequestSpec(
            prompt=text(self.rng, self.calibration.words_for(prompt)),
            max_tokens=output,
            target_prompt_tokens=prompt,
            target_output_tokens=output,
        )
