"""User-count profiles over time, as pure functions (Locust-free, so they test and plot
without gevent); `harness.load.shapes.StepAndSpikeShape` turns one into a LoadTestShape."""

from __future__ import annotations


def step_and_spike_users(t: float, base: int, step: int, spike: int, period_s: float, spike_s: float) -> int:
    """Users at time t: `base + step * k` in period k's calm phase, `spike` in its last
    `spike_s` seconds."""
    k = int(t // period_s)
    return spike if t - k * period_s >= period_s - spike_s else base + step * k
