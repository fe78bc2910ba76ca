"""How fast a rerun's server stepped, relative to the run the replay models: both step models
fitted to their own run's server timings (`step_fit`), timed on the run's typical batch (its
mean running sequences, decoding at its median context). A verdict's prediction that misses
while the rerun stepped at another speed is a miss of the machine, not of the replay's model
(`check`: a shared machine changes speed from one run to the next)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.advisor.evidence import completed
from harness.advisor.run_inputs import RunInputs
from harness.advisor.step_fit import StepFit, fit_steps


@dataclass(frozen=True, slots=True)
class StepReference:
    fit: StepFit
    batch: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, inputs: RunInputs) -> StepReference | None:
        fit = fit_steps(inputs.requests)
        done = completed(inputs.requests)
        if fit is None or done.empty:
            return None
        context = int(pd.to_numeric(done["prompt_tokens"], errors="coerce").median())
        running = pd.to_numeric(
            inputs.server.get("requests_running", pd.Series(dtype=float)), errors="coerce"
        )
        seqs = max(1, round(float(running.mean()))) if running.notna().any() else 1
        return cls(fit, tuple([(1, max(1, context))] * seqs))

    def relative(self, rerun: RunInputs) -> float | None:
        """The rerun's step time over the run's on the reference batch (None: no fit)."""
        other = fit_steps(rerun.requests)
        base = self.fit.step_time(self.batch)
        if other is None or base <= 0:
            return None
        ratio = other.step_time(self.batch) / base
        return float(ratio) if np.isfinite(ratio) else None
