"""The catalogue model a replay stands on when the run's server is not one the catalogue
describes (the bundled CPU engine, a --target nobody described), and the time axis of a replay
without the server's own step timings.

With a step fit the stand-in only gives the scheduler its context limit (the pool is the run's,
the steps are timed by the fit): SmolLM2 (the bundled engine's twin), or the smallest-context
catalogue model that admits the run's max_model_len. Without one, the real bundled engine is
modelled as SmolLM2-135M on an L4 with arrivals stretched by the ratio of that modelled decode
step to the run's median inter-token gap (`scaled_twin`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.advisor.deployment import Deployment
from reference_engine.catalogue import MODELS, ModelSpec, get_gpu, get_model
from reference_engine.sim.cost_model import CostModel

REAL_ENGINE_TWIN = "smollm2-135m"
REAL_ENGINE_GPU = "l4"


def observed_step_s(requests: pd.DataFrame) -> float | None:
    """The run's median inter-token gap (a decode step of the real engine, queueing aside)."""
    if "itl_s" not in requests.columns:
        return None
    gaps = [
        float(g)
        for row in requests["itl_s"].dropna()
        for g in (row if hasattr(row, "__len__") else [row])
        if g is not None and math.isfinite(float(g)) and g > 0
    ]
    return float(np.median(gaps)) if gaps else None


def scaled_twin(
    done: pd.DataFrame, twin, limit: int, blocks: int, mean_running: float | None
) -> tuple[float, str]:
    """Without a step-time fit: the twin's cost model, arrivals stretched by its modelled
    decode step over the run's median inter-token gap; (scale, time axis)."""
    observed = observed_step_s(done)
    batch = max(1, round(mean_running or 1))
    context = int((done["prompt_tokens"] + done["output_tokens"] / 2).median()) if len(done) else 256
    modelled = CostModel(twin, get_gpu(REAL_ENGINE_GPU)).step_time([(1, max(1, min(context, limit)))] * batch)
    scale = modelled / observed if observed else 1.0
    return scale, (
        f"modelled: the run's {blocks:,}-block pool with a {twin.name} on {REAL_ENGINE_GPU} cost model, "
        f"arrivals scaled x{scale:.3g} to the run's observed step time"
        + ("" if observed else " (no inter-token gaps recorded: unscaled)")
    )


def stand_in(dep: Deployment) -> ModelSpec:
    """The catalogue model standing in for one it does not know: SmolLM2 (the bundled engine's),
    or the smallest-context model that admits the run's max_model_len (only the scheduler's
    context limit reads it; the pool is the run's and the step times are fitted)."""
    if dep.model:
        return get_model(dep.model)
    smol, need = get_model(REAL_ENGINE_TWIN), dep.max_model_len or 0
    longer = [m for m in MODELS.values() if m.max_context >= need]
    return smol if need <= smol.max_context or not longer else min(longer, key=lambda m: m.max_context)
