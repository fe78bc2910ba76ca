"""ShareGPT-like and Alpaca-like request traces, synthesised the way the vLLM paper builds its own.

The paper (Kwon et al., SOSP 2023, arXiv 2309.06180, §6.1) tokenizes ShareGPT and Alpaca,
uses only their input and output lengths, and draws arrival times from a Poisson process
because the datasets carry no timestamps. Its Fig. 11 gives the length distributions:

    ShareGPT: "Input (mean: 161.31)", "Output (mean: 337.99)"
    Alpaca:   "Input (mean: 19.31)",  "Output (mean: 58.45)"

both heavily right-skewed (a spike near zero, a tail out to ~2000 tokens on the ShareGPT
panel). Source: the full text of arXiv 2309.06180v1 (Fig. 11 legends, Table 1, Figs. 2 and
13), read from a stored copy of the arXiv page and PDF text; §6.1 adds that ShareGPT has
"8.4x longer input prompts and 5.8x longer outputs on average than the Alpaca dataset, with
higher variance". The means are the paper's; the spreads are ours, chosen to agree with the
paper's other published numbers rather than guessed:

- Output sigma fixes E[o^2]/E[o], which decides the time-weighted context of a running
  request, p + E[o^2] / (2 E[o]), and from that how many requests a pool holds. With
  sigma 1.0 (ShareGPT) and 1.1 (Alpaca) that context is ~455 and ~107 tokens; the paper's
  Fig. 13 shows vLLM batching 30.42 (ShareGPT) and 132.44 (Alpaca) requests on average in
  OPT-13B's 15.7K KV slots (Table 1) at 96.3% token state (Fig. 2), i.e. at most ~500 and
  ~115 tokens each (at most: the pool need not have been full all the time).
- Prompt sigma 1.1 (ShareGPT, pasted text has the heavier tail; the same value as
  harness/workload/lengths.py) and 0.6 (Alpaca, one-line instructions). With independent
  prompt and output lengths only the prompt's mean enters the figures above.

Each marginal is a log-normal clipped to [1, 1024] (the paper's chatbot setting cuts the
prompt to 1024 tokens and generates at most 1024, so prompt + output fits OPT's 2048
context); mu is fitted so that the *clipped* mean equals the paper's mean.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from reference_engine.sim.replay import TraceRequest

PAPER = "Kwon et al., SOSP 2023 (arXiv 2309.06180)"


@dataclass(frozen=True, slots=True)
class LengthDist:
    """Prompt and output lengths in tokens: clipped log-normals with the given means."""

    name: str
    mean_prompt: float
    mean_output: float
    sigma_prompt: float
    sigma_output: float
    max_prompt: int = 1024
    max_output: int = 1024

    def scaled(self, factor: float) -> LengthDist:
        """The same shape with every length multiplied by `factor` (for the CPU model's short
        context): means and caps scale, sigmas (shape) do not."""
        return replace(
            self,
            name=f"{self.name} x{factor:g}",
            mean_prompt=self.mean_prompt * factor,
            mean_output=self.mean_output * factor,
            max_prompt=max(1, round(self.max_prompt * factor)),
            max_output=max(1, round(self.max_output * factor)),
        )


SHAREGPT = LengthDist("ShareGPT-like", 161.31, 337.99, sigma_prompt=1.1, sigma_output=1.0)
ALPACA = LengthDist("Alpaca-like", 19.31, 58.45, sigma_prompt=0.6, sigma_output=1.1)
WORKLOADS = {"sharegpt": SHAREGPT, "alpaca": ALPACA}


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def clipped_lognormal_mean(mu: float, sigma: float, lo: float, hi: float) -> float:
    """E[min(max(X, lo), hi)] for X ~ LogNormal(mu, sigma), in closed form."""
    a, b = math.log(lo), math.log(hi)
    # E[X; lo < X < hi] uses the log-normal's partial expectation.
    inner = math.exp(mu + sigma * sigma / 2) * (
        _phi((b - mu - sigma * sigma) / sigma) - _phi((a - mu - sigma * sigma) / sigma)
    )
    return lo * _phi((a - mu) / sigma) + inner + hi * (1.0 - _phi((b - mu) / sigma))


def fit_mu(mean: float, sigma: float, lo: float, hi: float) -> float:
    """The mu whose clipped log-normal has this mean (bisection; the clipped mean rises with mu)."""
    if not lo < mean < hi:
        raise ValueError(f"a mean of {mean} cannot come from lengths clipped to [{lo}, {hi}]")
    left, right = math.log(lo) - 10 * sigma, math.log(hi) + 10 * sigma
    for _ in range(200):
        mid = (left + right) / 2
        if clipped_lognormal_mean(mid, sigma, lo, hi) < mean:
            left = mid
        else:
            right = mid
    return (left + right) / 2


def draw_lengths(dist: LengthDist, n: int, seed: int) -> list[tuple[int, int]]:
    """`n` (prompt, output) pairs; prompt and output are independent draws."""
    rng = random.Random(seed)
    mu_p = fit_mu(dist.mean_prompt, dist.sigma_prompt, 1, dist.max_prompt)
    mu_o = fit_mu(dist.mean_output, dist.sigma_output, 1, dist.max_output)

    def draw(mu: float, sigma: float, cap: int) -> int:
        return min(cap, max(1, round(rng.lognormvariate(mu, sigma))))

    return [
        (draw(mu_p, dist.sigma_prompt, dist.max_prompt), draw(mu_o, dist.sigma_output, dist.max_output))
        for _ in range(n)
    ]


def poisson_trace(dist: LengthDist, n: int, rate: float, seed: int = 0) -> list[TraceRequest]:
    """`n` requests with Poisson arrivals at `rate` per second (exponential gaps), as §6.1."""
    rng = random.Random(seed + 1_000_003)
    t, trace = 0.0, []
    for prompt, output in draw_lengths(dist, n, seed):
        trace.append(TraceRequest(arrival_s=t, prompt_tokens=prompt, output_tokens=output))
        t += rng.expovariate(rate)
    return trace
