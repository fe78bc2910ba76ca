"""The run's own step times, fitted: what one scheduler step of the server that ran cost.

    step_s = overhead + per_decode_seq x (sequences decoding) + per_prefill_token x (prompt tokens computed)

A replay on this model runs in the run's own seconds, so its baseline can be held against
what the run measured (`fidelity`). The data are the server's per-request timings (the
reference engine's, or any server's that the bundle records as server_* columns):
- a request's decode time over its tokens after the first is its mean step interval, in
  steps that held, on average, B sequences (every request running in that window, counted
  from the requests' own server-side intervals) and the prompts of the requests whose prefill
  fell inside it: one row (1, B, prefilled tokens per step) -> mean step;
- a request's prefill time (first scheduled to first token) is the step that computed its
  uncached prompt, with the prompts of the requests whose first token came out of the same
  step (within SAME_STEP_S), next to the B sequences then decoding: one row
  (1, B, prompt tokens of that step) -> time.
Requests that were preempted are left out (their decode time holds a recompute and a wait).
The three coefficients are the non-negative least-squares fit of all rows; with fewer than
MIN_ROWS rows, or a fit that explains nothing, there is no fit (None) and the caller keeps
the catalogue's cost model.

Invariant: `step_time(batch)` takes the simulator's batches, (new tokens, context) per
sequence; a sequence with one new token is decoding, any other is (a chunk of) a prefill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from reference_engine.sim.cost_model import StepTimeModel

MIN_ROWS = 12
SAME_STEP_S = 0.0005  # first tokens this close together came out of one step


@dataclass(frozen=True, slots=True)
class StepFit:
    overhead_s: float
    per_decode_seq_s: float
    per_prefill_token_s: float
    rows: int
    median_error: float  # median |fitted - observed| / observed over the rows

    def step_time(self, batch: Sequence[tuple[int, int]]) -> float:
        if not batch:
            return 0.0
        decoding = sum(1 for new, _ in batch if new == 1)
        prefill = sum(new for new, _ in batch if new != 1)
        return self.overhead_s + self.per_decode_seq_s * decoding + self.per_prefill_token_s * prefill

    def to_dict(self) -> dict:
        return asdict(self)


def _nnls(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with every coefficient >= 0 (an active set of at most three columns:
    drop the most negative, refit, until none is negative)."""
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            return coef
        active.pop(int(np.argmin(sol)))
    return coef


def _mean_count(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """For each window [lo, hi], the time-averaged sum of weights of intervals [start, end]
    covering it, from the integral of the step function (O(n log n))."""
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([weights, -weights])
    order = np.argsort(times, kind="stable")
    times, level = times[order], np.cumsum(deltas[order])
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(times))])  # integral up to times[k]

    def integral(t: np.ndarray) -> np.ndarray:
        k = np.clip(np.searchsorted(times, t, side="right") - 1, 0, len(times) - 1)
        return np.where(t <= times[0], 0.0, area[k] + level[k] * (t - times[k]))

    span = np.maximum(hi - lo, 1e-9)
    return (integral(hi) - integral(lo)) / span


NEED = ("server_arrival_unix", "server_queue_time_s", "server_ttft_s", "server_e2e_s", "server_decode_time_s")


def _column(r: pd.DataFrame, name: str, default: float = np.nan) -> np.ndarray:
    if name not in r.columns:
        return np.full(len(r), default)
    return pd.to_numeric(r[name], errors="coerce").to_numpy(float)


@dataclass(frozen=True, slots=True)
class _Requests:
    """The server-side life of each completed request: running from `start` (scheduled) to
    `end`, first token at `first`; `weight` sequences (choices) each."""

    start: np.ndarray
    first: np.ndarray
    end: np.ndarray
    weight: np.ndarray
    steps: np.ndarray  # decode steps: tokens per choice after the first
    uncached: np.ndarray  # prompt tokens the server computed
    decode_s: np.ndarray
    prefill_s: np.ndarray
    clean: np.ndarray  # not preempted

    @classmethod
    def of(cls, r: pd.DataFrame) -> _Requests:
        arrival = _column(r, "server_arrival_unix")
        weight = np.nan_to_num(_column(r, "n", 1.0), nan=1.0).clip(min=1.0)
        cached = np.nan_to_num(_column(r, "server_cached_prompt_tokens", 0.0))
        return cls(
            arrival + _column(r, "server_queue_time_s"),
            arrival + _column(r, "server_ttft_s"),
            arrival + _column(r, "server_e2e_s"),
            weight,
            _column(r, "output_tokens") / weight - 1,
            np.maximum(0.0, np.nan_to_num(_column(r, "prompt_tokens")) - cached),
            _column(r, "server_decode_time_s"),
            _column(r, "server_prefill_time_s"),
            np.nan_to_num(_column(r, "server_num_preemptions", 0.0)) == 0,
        )

    def running(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return _mean_count(self.start, self.end, self.weight, lo, hi)


def _decode_rows(q: _Requests, cum_tokens: np.ndarray, firsts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = q.clean & (q.steps >= 2) & np.isfinite(q.decode_s)
    lo, hi = q.first[d], q.end[d]
    # Prompt tokens prefilled inside each decode window: other requests' first tokens there.
    inside = (
        cum_tokens[np.searchsorted(firsts, hi, "right")] - cum_tokens[np.searchsorted(firsts, lo, "right")]
    )
    x = np.column_stack([np.ones(d.sum()), q.running(lo, hi), inside / q.steps[d]])
    return x, q.decode_s[d] / q.steps[d]


def _prefill_rows(
    q: _Requests, cum_tokens: np.ndarray, cum_weight: np.ndarray, firsts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    p = q.clean & np.isfinite(q.prefill_s) & (q.uncached > 0)
    lo = np.searchsorted(firsts, q.first[p] - SAME_STEP_S, "left")
    hi = np.searchsorted(firsts, q.first[p] + SAME_STEP_S, "right")
    at = q.first[p] - 1e-6  # just before the step ended: everyone in it is running
    decoding = q.running(at, at + 1e-9) - (cum_weight[hi] - cum_weight[lo])  # minus the step's prefills
    x = np.column_stack([np.ones(p.sum()), np.maximum(0.0, decoding), cum_tokens[hi] - cum_tokens[lo]])
    return x, q.prefill_s[p]


def fit_steps(requests: pd.DataFrame) -> StepFit | None:
    """The step-time model of the run's server, or None (see the module doc)."""
    if requests.empty or any(c not in requests.columns for c in NEED):
        return None
    r = requests[requests["ok"].astype(bool)] if "ok" in requests.columns else requests
    q = _Requests.of(r)
    known = np.isfinite(q.start) & np.isfinite(q.first) & np.isfinite(q.end)
    known &= (q.end >= q.first) & (q.first >= q.start)
    if known.sum() < MIN_ROWS:
        return None
    q = _Requests(*(getattr(q, f)[known] for f in q.__dataclass_fields__))
    order = np.argsort(q.first, kind="stable")
    firsts = q.first[order]
    cum_tokens = np.concatenate([[0.0], np.cumsum(q.uncached[order])])
    cum_weight = np.concatenate([[0.0], np.cumsum(q.weight[order])])
    xd, yd = _decode_rows(q, cum_tokens, firsts)
    xp, yp = _prefill_rows(q, cum_tokens, cum_weight, firsts)
    x, y = np.vstack([xd, xp]), np.concatenate([yd, yp])
    keep = np.isfinite(x).all(axis=1) & np.isfinite(y) & (y > 0)
    x, y = x[keep], y[keep]
    if len(y) < MIN_ROWS:
        return None
    a, b, c = _nnls(x, y)
    fitted = x @ np.array([a, b, c])
    if not (fitted > 0).all():
        return None
    error = float(np.median(np.abs(fitted - y) / y))
    return StepFit(float(a), float(b), float(c), int(len(y)), error)


@dataclass(frozen=True, slots=True)
class Transferred:
    """A fit carried over to other hardware: each step scaled by the catalogue cost model's
    ratio between the new deployment and the one that ran (`base`)."""

    fit: StepFit
    base: StepTimeModel
    changed: StepTimeModel

    def step_time(self, batch: Sequence[tuple[int, int]]) -> float:
        base = self.base.step_time(batch)
        return self.fit.step_time(batch) * (self.changed.step_time(batch) / base if base > 0 else 1.0)
