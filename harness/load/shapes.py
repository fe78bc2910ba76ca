"""Locust load shapes built on the pure user-count profiles of `harness.workload.profiles`."""

from __future__ import annotations

from locust import LoadTestShape

from harness.workload.profiles import step_and_spike_users


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
