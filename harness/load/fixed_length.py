"""Fixed-length requests, the user class that `long_context`, `rate`, `parallel_sampling` and
`bursty` share (they differ only in their defaults and in how users arrive)."""

from __future__ import annotations

from typing import ClassVar

from harness.load.user import LLMUser
from harness.workload.prompts import text
from harness.workload.request_spec import RequestSpec


class FixedLengthUser(LLMUser):
    """Random text of `--prompt-tokens` (as the server counts them, via calibration) and
    `--output-tokens` to generate; `--n` choices where the workload has that option.
    Random words per request, so requests share nothing but the chat template."""

    abstract = True
    uses_n: ClassVar[bool] = False

    def next_request(self) -> RequestSpec:
        n = int(self.option("n")) if self.uses_n else 1
        prompt, output = self.fit_lengths(
            int(self.option("prompt_tokens")), int(self.option("output_tokens"))
        )
        return RequestSpec(
            prompt=text(self.rng, self.calibration.words_for(prompt)),
            max_tokens=output,
            n=n,
            target_prompt_tokens=prompt,
            target_output_tokens=output,
        )
