"""The run's own step times, fitted: what one scheduler step of the server that ran cost.

    step_s = overhead + per_decode_seq x (sequences decoding)
             + per_prefill_token x (prompt tokens computed)
             + per_prefill_context x (each computed prompt token x the length of its prompt)

The last term is what a prompt's attention and its growing working set add on top of the
per-token cost: on the bundled CPU engine a 512-token prefill costs ~2.7x a 256-token one,
not 2x (measured in-process). A replay on this model runs in the run's own seconds, so its
baseline can be held against what the run measured (`fidelity`). The data are the server's
per-request timings (the reference engine's, llama.cpp's, or a server's OTLP spans, all in
the bundle's server_* columns):
- a request's decode time over its tokens after the first is its mean step interval, in
  steps that held, on average, B sequences (every request running in that window, counted
  from the requests' own server-side intervals) and the prompts of the requests whose prefill
  fell inside it: one row (1, B, prefilled tokens per step, their context per step) -> mean step;
- a request's prefill time (first scheduled to first token) is the step that computed its
  uncached prompt, with the prompts of the requests whose first token came out of the same
  step (within SAME_STEP_S), next to the B sequences then decoding: one row
  (1, B, prompt tokens of that step, their context) -> time; a prompt over the step's token
  budget (chunked prefill, as CPU engines and vLLM V1 do) took n = ceil(uncached / budget)
  steps: (n, n x B, ...).
Requests that were preempted are left out (their decode time holds a recompute and a wait).
The coefficients are the non-negative least-squares fit of the rows' relative errors (a
shared machine stalls some steps for seconds; a stall must not set the slope), after one
trim: rows more than TRIM_FACTOR times the median relative error off (at least TRIM_FLOOR)
are outliers, dropped and counted, and the rest refitted. With fewer than MIN_ROWS rows, or a
fit that explains nothing, there is no fit (None) and the caller keeps the catalogue's model.

Invariant: `step_time(batch)` takes the simulator's batches, (new tokens, context) per
sequence; a sequence with one new token is decoding, any other is (a chunk of) a prefill.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from harness.advisor.step_drift import Drift, find_stalls, fit_drift
from reference_engine.sim.cost_model import StepTimeModel

MIN_ROWS = 12
SAME_STEP_S = 0.0005  # first tokens this close together came out of one step
TRIM_FACTOR = 3.0
TRIM_FLOOR = 0.25
DRIFT_GAIN = 0.8  # the drift is kept when it cuts the fit's median error by a fifth or more
DRIFT_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class StepFit:
    overhead_s: float
    per_decode_seq_s: float
    per_prefill_token_s: float
    rows: int
    median_error: float  # median |fitted - observed| / observed over the rows kept
    per_prefill_context_s: float = 0.0  # per prefilled token per token of its context
    outliers: int = 0  # rows dropped by the trim (see the module doc)
    drift: Drift | None = None  # the server's speed over the run (`step_drift`); None: steady
    stalls: tuple[tuple[float, float], ...] = ()  # (unix start, seconds over the model): `step_drift`

    def step_time(self, batch: Sequence[tuple[int, int]]) -> float:
        if not batch:
            return 0.0
        decoding = prefill = context = 0
        for new, end in batch:
            if new == 1:
                decoding += 1
            else:
                prefill += new
                context += new * end
        return (
            self.overhead_s
            + self.per_decode_seq_s * decoding
            + self.per_prefill_token_s * prefill
            + self.per_prefill_context_s * context
        )

    def describe(self) -> str:
        """The fit in words, for the replay's time axis."""
        return (
            f"{self.overhead_s * 1000:.2f} ms + {self.per_decode_seq_s * 1000:.3f} ms per decoding "
            "sequence + "
            f"{self.per_prefill_token_s * 1e6:.1f} us per prefilled token + "
            f"{self.per_prefill_context_s * 1e9:.1f} ns per prefilled token per token of its prompt; "
            f"{self.rows} points, median error {self.median_error:.0%}"
            + (f", {self.outliers} outlier(s) left out" if self.outliers else "")
            + (
                f"; the server's speed drifted x{self.drift.spread:.2f} over the run "
                f"({len(self.drift.factors)} knots), replayed as it drifted"
                if self.drift
                else ""
            )
            + (
                f"; {len(self.stalls)} stalled step(s) ({sum(s for _, s in self.stalls):.2f} s over the "
                "model in all) replayed where they happened"
                if self.stalls
                else ""
            )
        )

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
    context: np.ndarray  # uncached x the prompt's length (the per_prefill_context term)
    decode_s: np.ndarray
    prefill_s: np.ndarray
    clean: np.ndarray  # not preempted

    @classmethod
    def of(cls, r: pd.DataFrame, origin: float) -> _Requests:
        # Seconds from `origin`: at unix scale (1.8e9 s) a float resolves only ~0.2 us, too
        # coarse for the instant windows `_prefill_rows` takes.
        arrival = _column(r, "server_arrival_unix") - origin
        weight = np.nan_to_num(_column(r, "n", 1.0), nan=1.0).clip(min=1.0)
        cached = np.nan_to_num(_column(r, "server_cached_prompt_tokens", 0.0))
        return cls(
            arrival + _column(r, "server_queue_time_s"),
            arrival + _column(r, "server_ttft_s"),
            arrival + _column(r, "server_e2e_s"),
            weight,
            _column(r, "output_tokens") / weight - 1,
            np.maximum(0.0, np.nan_to_num(_column(r, "prompt_tokens")) - cached),
            np.maximum(0.0, np.nan_to_num(_column(r, "prompt_tokens")) - cached)
            * np.nan_to_num(_column(r, "prompt_tokens")),
            _column(r, "server_decode_time_s"),
            _column(r, "server_prefill_time_s"),
            np.nan_to_num(_column(r, "server_num_preemptions", 0.0)) == 0,
        )

    def running(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return _mean_count(self.start, self.end, self.weight, lo, hi)


@dataclass(frozen=True, slots=True)
class _Prefills:
    """The requests' first tokens in time order, with running sums of what their prefills
    computed, so any window's prefill work is two look-ups."""

    firsts: np.ndarray
    tokens: np.ndarray  # cumulative, one longer than firsts
    context: np.ndarray
    weight: np.ndarray

    @classmethod
    def of(cls, q: _Requests) -> _Prefills:
        order = np.argsort(q.first, kind="stable")

        def cum(values: np.ndarray) -> np.ndarray:
            return np.concatenate([[0.0], np.cumsum(values[order])])

        return cls(q.first[order], cum(q.uncached), cum(q.context), cum(q.weight))

    def between(self, lo: np.ndarray, hi: np.ndarray, side: str = "right") -> tuple[np.ndarray, ...]:
        a = np.searchsorted(self.firsts, lo, side)  # type: ignore[call-overload]
        b = np.searchsorted(self.firsts, hi, "right")
        return tuple(cum[b] - cum[a] for cum in (self.tokens, self.context, self.weight))


Rows = tuple[np.ndarray, np.ndarray, np.ndarray]  # x, y (seconds per step), when (run seconds)


def _decode_rows(q: _Requests, pre: _Prefills) -> Rows:
    d = q.clean & (q.steps >= 2) & np.isfinite(q.decode_s)
    steps = q.steps[d]
    # Prompt tokens prefilled inside each decode window: other requests' first tokens there.
    tokens, context, _ = pre.between(q.first[d], q.end[d])
    x = np.column_stack([np.ones(d.sum()), q.running(q.first[d], q.end[d]), tokens / steps, context / steps])
    return x, q.decode_s[d] / steps, (q.first[d] + q.end[d]) / 2


def _prefill_rows(q: _Requests, pre: _Prefills, budget: int | None) -> Rows:
    p = q.clean & np.isfinite(q.prefill_s) & (q.uncached > 0)
    tokens, context, weight = pre.between(q.first[p] - SAME_STEP_S, q.first[p] + SAME_STEP_S, "left")
    at = q.first[p] - 1e-6  # just before the step ended: everyone in it is running
    decoding = q.running(at, at + 1e-9) - weight  # minus the step's prefills
    # A prompt longer than the step's token budget is prefilled in chunks, one per step, each
    # step with its own overhead and the sequences decoding beside it.
    steps = np.ceil(q.uncached[p] / budget).clip(min=1) if budget else np.ones(p.sum())
    x = np.column_stack([steps, np.maximum(0.0, decoding) * steps, tokens, context])
    return x, q.prefill_s[p], q.first[p] - q.prefill_s[p] / 2


def _relative_fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(coefficients, relative errors): NNLS on each row divided by its observed time."""
    coef = _nnls(x / y[:, None], np.ones(len(y)))
    return coef, np.abs(x @ coef - y) / y


def _rows(r: pd.DataFrame, budget: int | None) -> tuple[np.ndarray, ...] | None:
    """The fit's rows (x, y, unix time, whether the row is one step: a prefill), or None with
    fewer than MIN_ROWS."""
    arrival = _column(r, "server_arrival_unix")
    if not np.isfinite(arrival).any():
        return None
    origin = float(np.nanmin(arrival))
    q = _Requests.of(r, origin)
    known = np.isfinite(q.start) & np.isfinite(q.first) & np.isfinite(q.end)
    known &= (q.end >= q.first) & (q.first >= q.start)
    if known.sum() < MIN_ROWS:
        return None
    q = _Requests(*(getattr(q, f)[known] for f in q.__dataclass_fields__))
    pre = _Prefills.of(q)
    parts = [_decode_rows(q, pre), _prefill_rows(q, pre, budget)]
    x, y, t = (np.concatenate([p[k] for p in parts]) for k in range(3))
    single = np.concatenate([np.zeros(len(parts[0][1]), bool), parts[1][0][:, 0] == 1])
    keep = np.isfinite(x).all(axis=1) & np.isfinite(y) & (y > 0)
    return (x[keep], y[keep], t[keep] + origin, single[keep]) if keep.sum() >= MIN_ROWS else None


def _trimmed_fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coefficients, relative errors of the rows kept, which rows were kept)."""
    coef, error = _relative_fit(x, y)
    inlier = error <= max(TRIM_FACTOR * float(np.median(error)), TRIM_FLOOR)
    if inlier.sum() < MIN_ROWS or inlier.all():
        return coef, error, np.ones(len(y), bool)
    coef, kept_error = _relative_fit(x[inlier], y[inlier])
    return coef, kept_error, inlier


def fit_steps(requests: pd.DataFrame, budget: int | None = None) -> StepFit | None:
    """The step-time model of the run's server, or None (see the module doc); `budget`: the
    server's max_num_batched_tokens, when known (longer prompts were prefilled in chunks)."""
    if requests.empty or any(c not in requests.columns for c in NEED):
        return None
    rows = _rows(requests[requests["ok"].astype(bool)] if "ok" in requests.columns else requests, budget)
    if rows is None:
        return None
    x, y, t, single = rows
    coef, error, kept = _trimmed_fit(x, y)
    drift, d_coef, d_kept = None, coef, kept
    for _ in range(DRIFT_ROUNDS):  # the drift from the residuals, the coefficients under the drift
        drift = fit_drift(t[d_kept], y[d_kept] / (x[d_kept] @ d_coef))
        if drift is None:
            break
        d_coef, d_error, d_kept = _trimmed_fit(x * drift.at(t)[:, None], y)
    # Kept only where it explains much: a steady server's drift is noise around 1.
    if drift is not None and float(np.median(d_error)) <= DRIFT_GAIN * float(np.median(error)):
        coef, error, kept = d_coef, d_error, d_kept
    else:
        drift = None
    if not (x @ coef > 0).all():
        return None
    a, b, c, d = (float(v) for v in coef)
    outliers = int(len(y) - kept.sum())
    modelled = (x @ coef) * (drift.at(t) if drift is not None else 1.0)
    stalls = find_stalls(t[single & ~kept] - y[single & ~kept] / 2, (y - modelled)[single & ~kept])
    return StepFit(a, b, c, int(kept.sum()), float(np.median(error)), d, outliers, drift, stalls)


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
