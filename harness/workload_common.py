"""Pieces several workloads share: fixed-length requests and the step-and-spike shape.

Kept out of the locustfiles so they do not grow copy-paste twins: `long_context`, `rate`,
`parallel_sampling` and `bursty` differ only in their defaults and in how users arrive.
"""

from __future__ import annotations

from typing import ClassVar

from locust import LoadTestShape

from harness.load_shapes import step_and_spike_users
from harness.locust_user import LLMUser
from harness.prompt_words import text
from harness.request_spec import RequestSpec


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


class StepAndSpikeShape(LoadTestShape):
    """Steps the calm user count up every period and spikes at the end of each one.

    `use_common_options`: the shape reads `--run-time` itself and returns None when it is
    up — with a shape, Locust's own run-time timer only starts after the shape has ended.
    Spawn rate equals the target count, so each change lands within about a second.
    """

    abstract = True
    use_common_options = True

    def tick(self) -> tuple[int, float] | None:
        opts = self.runner.environment.parsed_options
        t = self.get_run_time()
        if opts.run_time and t >= opts.run_time:
            return None
        users = step_and_spike_users(
            t, opts.base_users, opts.step_users, opts.spike_users, opts.period_s, opts.spike_s
        )
        return max(0, users), float(max(1, users))
