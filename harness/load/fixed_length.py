"""Requests of given mean lengths, the user class that `long_context`, `rate`,
`parallel_sampling` and `bursty` share (they differ only in their defaults and in how users
arrive)."""

from __future__ import annotations

from typing import ClassVar

from harness.load.user import LLMUser
from harness.workload.lengths import spread
from harness.workload.prompts import text
from harness.workload.request_spec import RequestSpec


class FixedLengthUser(LLMUser):
    """Random text of about `--prompt-tokens` (as the server counts them, via calibration)
    and about `--output-tokens` to generate, each drawn within `--length-spread` of its
    mean; `--n` choices where the workload has that option. Random words per request, so
    requests share nothing but the chat template."""

    abstract = True
    uses_n: ClassVar[bool] = False

    def next_request(self) -> RequestSpec:
        n = int(self.option("n")) if self.uses_n else 1
        relative = float(self.option("length_spread"))
        prompt, output = self.fit_lengths(
            spread(self.rng, int(self.option("prompt_tokens")), relative),
            spread(self.rng, int(self.option("output_tokens")), relative),
        )
        return RequestSpec(
            prompt=text(self.rng, self.calibration.words_for(prompt)),
            max_tokens=output,
            n=n,
            target_prompt_tokens=prompt,
            target_output_tokens=output,
        )
