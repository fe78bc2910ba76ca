"""Did the client distort the numbers? Client timings against the server's own, schedule lag
and the load generator's CPU warnings decide whether a run's percentiles can be trusted.

Client delay per request = client time - server time, for TTFT and for E2E, and the smaller
of the two. A busy client reads *every* chunk late, so both grow; other causes inflate only
one (a model whose first tokens decode to no visible text delays the client's TTFT, which
counts text, but not its E2E). The delay also holds the server's own HTTP layer after its
engine stamped the token, which no client-side number can separate; a server whose event
loop is that late distorts what users see just the same. The best request's delay is the
floor (network round trip, HTTP and SSE parsing, present in every request and part of what
users see); the *lag* is the delay above that floor. The run is unreliable when:
- lag p50 > 50 ms: the typical request was read 50 ms late, the signature of a saturated
  client (a healthy Python/gevent client on loopback adds a few ms; 50 ms is twice AIPerf's
  25 ms event-loop-lag warning and finer than any latency SLO people set);
- the lag moved a reported p99 (TTFT or E2E) by more than max(50 ms, 10 %): the p99 of the
  client's values against the p99 of the same values with each request's lag taken out.
  This asks the user's question directly ("would the headline change?"), so one or two
  late reads, which do not move a p99 much, do not condemn a run; the 10 % term keeps
  slow servers (seconds) from being flagged for jitter small next to what is measured;
- open-loop schedule lag p99 > 50 ms: requests left late, so the offered load was lower
  than asked and the queueing it would have caused is missing (coordinated omission);
- the load generator warned about its CPU (Locust: above 90 %) in run.json or its logs;
- any request failed inside the client (`client_error`), or nothing succeeded at all;
- more than a fifth of the inter-token gaps are under 1 ms and the client caused it
  (`bunching`: it read late, so chunks waited for it and came out together). Bunching the
  server caused is a note: the client measured what the server sent.
A workload not meant to share prompts that found them cached (`cache_hits`) gets a note:
the measurement is right, the workload was not the one asked for.

Without per-request server timings, the server's TTFT histogram (increase over the run)
gives its p50/p99; the upper edge of the bucket holding each quantile is compared with the
client's, so the estimate is a lower bound and bucket width cannot raise a false alarm.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.bunching import bunching
from harness.analysis.cache_hits import unexpected_hits
from harness.analysis.stats import clean
from harness.analysis.ttft_histogram import histogram_quantile, ttft_histogram_increase
from harness.bundle.finding import Finding
from harness.bundle.read import measured

LAG_S = 0.050
TAIL_SHARE = 0.10  # of the corrected p99
SCHEDULE_LAG_S = 0.050
MIN_REQUESTS = 5


@dataclass(frozen=True, slots=True)
class SelfCheck:
    reliable: bool
    reasons: list[Finding] = field(default_factory=list)
    method: str = "none"  # "per_request", "histogram" or "none" (no server TTFT to compare with)
    delay_floor_s: float | None = None  # smallest client delay: network + parsing
    lag_p50_s: float | None = None  # client delay above the floor
    lag_p99_s: float | None = None
    ttft_p99_distortion_s: float | None = None  # reported p99 minus p99 without the lag
    e2e_p99_distortion_s: float | None = None
    server_ttft_p50_s: float | None = None
    schedule_lag_p99_s: float | None = None
    cpu_warnings: list[str] = field(default_factory=list)
    notes: list[Finding] = field(default_factory=list)
    bunching: dict[str, Any] = field(default_factory=dict)  # analysis.bunching.Bunching

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "reasons": [r.to_dict() for r in self.reasons],
            "notes": [n.to_dict() for n in self.notes],
        }


def cpu_warnings(run: dict[str, Any], log_warnings: list[str] | None = None) -> list[str]:
    """CPU warnings from the load generator: strings mentioning CPU under any run.json key
    containing 'warning', plus Locust's own log lines (see `bundle.client_log_warnings`)."""

    def walk(obj: Any, under_warning: bool) -> Iterator[str]:
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield from walk(v, under_warning or "warning" in str(k).lower())
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                yield from walk(v, under_warning)
        elif under_warning and isinstance(obj, str) and "cpu" in obj.lower():
            yield obj

    return list(dict.fromkeys([*walk(run, False), *(log_warnings or [])]))


def _per_request(ok: pd.DataFrame) -> tuple[np.ndarray, ...] | None:
    both = ok[ok["server_ttft_s"].notna()]
    if len(both) < MIN_REQUESTS:
        return None
    ttft = (both["ttft_s"] - both["server_ttft_s"]).to_numpy(float)
    e2e = (both["e2e_s"] - both["server_e2e_s"]).to_numpy(float)
    delay = np.where(np.isfinite(e2e), np.fmin(ttft, e2e), ttft)
    keep = np.isfinite(delay)
    return (
        delay[keep],
        both["server_ttft_s"].to_numpy(float)[keep],
        both["ttft_s"].to_numpy(float)[keep],
        both["e2e_s"].to_numpy(float)[keep],
    )


def _distortion(values: np.ndarray, lag: np.ndarray) -> tuple[float, float]:
    """(p99 of values - p99 of values without the lag, that corrected p99)."""
    reported, corrected = np.percentile(values, 99), np.percentile(values - lag, 99)
    return float(reported - corrected), float(corrected)


def _queue_unknown(ok: pd.DataFrame, server: pd.DataFrame) -> Finding | None:
    """A note when the server's per-request timings leave out queue time (llama.cpp's start
    when a slot takes the request): the client delay then includes any wait for a slot. When
    the server had requests waiting, that wait cannot be told from client lag, so the lag is
    not checked."""
    timed = ok[ok["server_ttft_s"].notna()]
    if timed.empty or timed["server_queue_time_s"].notna().any():
        return None
    waiting = server["requests_waiting"] if "requests_waiting" in server.columns else pd.Series(dtype=float)
    base = "the server's per-request timings exclude queue time (they start when a slot takes the request)"
    if pd.to_numeric(waiting, errors="coerce").fillna(0).max() > 0:
        return Finding(
            "queue_time_unknown",
            f"{base}; requests waited for a slot during the run, so client lag is not checked",
        )
    return Finding(
        "queue_time_excluded", f"{base}; no request waited for a slot, so the client delay is the client's"
    )


def self_check(
    all_requests: pd.DataFrame,
    server: pd.DataFrame,
    run: dict[str, Any] | None = None,
    log_warnings: list[str] | None = None,
) -> SelfCheck:
    """Judge the run (see the module docstring for every threshold and its reason)."""
    requests = measured(all_requests)
    ok = requests[requests["ok"]]
    reasons: list[Finding] = []
    notes: list[Finding] = []
    method, floor, l50, l99, s50 = "none", None, None, None, None
    distortions: dict[str, tuple[float, float]] = {}  # metric -> (distortion, corrected p99)
    per_req = _per_request(ok)
    if per_req is not None and per_req[0].size >= MIN_REQUESTS:
        method = "per_request"
        delay, server_ttft, ttft, e2e = per_req
        floor = float(delay.min())
        lag = delay - floor
        l50, l99 = (float(x) for x in np.percentile(lag, [50, 99]))
        s50 = float(np.percentile(server_ttft, 50))
        distortions = {"TTFT": _distortion(ttft, lag), "E2E": _distortion(e2e, lag)}
    else:
        hist = ttft_histogram_increase(server)
        client = clean(ok["ttft_s"].to_numpy(float))
        if hist is not None and hist[1][-1] >= MIN_REQUESTS and client.size >= MIN_REQUESTS:
            method = "histogram"
            bounds, counts = hist
            s50 = histogram_quantile(bounds, counts, 0.5)
            up50, up99 = (
                histogram_quantile(bounds, counts, 0.5, True),
                histogram_quantile(bounds, counts, 0.99, True),
            )
            c50, c99 = np.percentile(client, [50, 99])
            l50 = float(c50 - up50) if up50 is not None else None
            if up99 is not None:
                distortions = {"TTFT": (float(c99 - up99), up99)}
            notes.append(
                Finding(
                    "lag_from_histogram",
                    "client delay from the server's TTFT histogram: a lower bound (bucket upper edges), "
                    "no floor",
                )
            )
        elif timed := int(ok["server_ttft_s"].notna().sum()):
            notes.append(
                Finding(
                    "server_ttft_too_few",
                    f"server TTFT for {timed} request(s), fewer than the {MIN_REQUESTS} a check needs: "
                    "client delay not checked",
                )
            )
        else:
            notes.append(
                Finding(
                    "no_server_ttft", "no server TTFT (per request or histogram): client delay not checked"
                )
            )
    if method == "per_request" and (queue := _queue_unknown(ok, server)) is not None:
        notes.append(queue)
        if queue.code == "queue_time_unknown":
            l50 = l99 = None
            distortions = {}
    saturated = l50 is not None and l50 > LAG_S
    if saturated:
        reasons.append(
            Finding(
                "client_lag_typical",
                f"the client read the typical request {l50 * 1000:.0f} ms late "
                f"(lag p50 > {LAG_S * 1000:.0f} ms): "
                "it was saturated (or the server's HTTP layer was); add Locust workers (--workers) or "
                "lower the users per worker",
            )
        )
    for metric, (moved, corrected) in distortions.items():
        limit = max(LAG_S, TAIL_SHARE * corrected)
        if moved > limit and not saturated:
            reasons.append(
                Finding(
                    "client_lag_moved_p99",
                    f"client lag moved the {metric} p99 by {moved * 1000:.0f} ms (> {limit * 1000:.0f} ms = "
                    f"max(50 ms, 10% of {corrected * 1000:.0f} ms)): add Locust workers or lower users "
                    "per worker",
                    subject=metric,
                )
            )
    lag = clean(requests["schedule_lag_s"].to_numpy(float))
    sched99 = float(np.percentile(lag, 99)) if lag.size else None
    if sched99 is not None and sched99 > SCHEDULE_LAG_S:
        reasons.append(
            Finding(
                "schedule_lag",
                f"open-loop schedule lag p99 is {sched99 * 1000:.0f} ms "
                f"(> {SCHEDULE_LAG_S * 1000:.0f} ms): requests "
                "left late, so the offered load was lower than asked; add users (slots) or workers",
            )
        )
    cpu = cpu_warnings(run or {}, log_warnings)
    if cpu:
        reasons.append(Finding("load_generator_cpu", f"the load generator warned about its CPU ({cpu[0]})"))
    n_client_err = int((requests["error_class"] == "client_error").sum())
    if n_client_err:
        reasons.append(
            Finding("client_errors", f"{n_client_err} request(s) failed inside the client (client_error)")
        )
    if ok.empty:
        reasons.append(Finding("no_success", "no request succeeded: there is nothing to measure"))
    bunched = bunching(ok, server, l50 if method == "per_request" else None)
    if (found := bunched.finding()) is not None:
        (reasons if found.code == "bunched_by_client" else notes).append(found)
    if (warm := unexpected_hits(ok, run or {})) is not None:
        notes.append(warm)
    return SelfCheck(
        reliable=not reasons,
        reasons=reasons,
        method=method,
        delay_floor_s=floor,
        lag_p50_s=l50,
        lag_p99_s=l99,
        ttft_p99_distortion_s=distortions.get("TTFT", (None,))[0],
        e2e_p99_distortion_s=distortions.get("E2E", (None,))[0],
        server_ttft_p50_s=s50,
        schedule_lag_p99_s=sched99,
        cpu_warnings=cpu,
        notes=notes,
        bunching=bunched.to_dict(),
    )
