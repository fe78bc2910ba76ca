"""Client latency joined to server state: what the KV cache was doing when a request was sent.

Invariants:
- Each request is matched to the last server sample at or before its send time (pandas
  `merge_asof`, backward, within `tolerance_s`); a request with no such sample (sent
  before the exporter's first scrape, or during an outage) falls in band "unknown" rather
  than borrowing a later state it could not have seen.
- Preemption onset is the first sample at which the preemption counter *increased* (see
  `server.preemption_onset`); "before" and "after" split requests by send time at it.
- Comparisons need at least `MIN_COMPARE` successful requests on each side; with fewer, a
  p99 is one or two requests and the verdict says so instead of guessing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.slo import per_request_metrics
from harness.analysis.stats import Distribution, distribution
from harness.bundle.read import measured

# Band edges on KV usage (0-1). Finer at the top: that is where admission stalls and preemption start.
BAND_EDGES: tuple[float, ...] = (0.0, 0.5, 0.8, 0.9, 0.95)
MIN_COMPARE = 5
TOLERANCE_S = 5.0


def band_label(lo: float, hi: float | None) -> str:
    return f"≥{lo:.0%}" if hi is None else f"{lo:.0%}–{hi:.0%}"


def attach_server_state(
    requests: pd.DataFrame, tl: pd.DataFrame, tolerance_s: float = TOLERANCE_S
) -> pd.DataFrame:
    """`requests` plus kv_usage_at_send, running_at_send, waiting_at_send and kv_band."""
    req = requests.sort_values("send_time_unix", kind="stable").copy()
    req = req[req["send_time_unix"].notna()]
    state = tl[["time_unix", "kv_usage_ratio", "requests_running", "requests_waiting"]].rename(
        columns={
            "kv_usage_ratio": "kv_usage_at_send",
            "requests_running": "running_at_send",
            "requests_waiting": "waiting_at_send",
        }
    )
    state = state.dropna(subset=["time_unix"]).sort_values("time_unix")
    if state.empty:
        for c in ("kv_usage_at_send", "running_at_send", "waiting_at_send"):
            req[c] = np.nan
    else:
        req = pd.merge_asof(
            req,
            state,
            left_on="send_time_unix",
            right_on="time_unix",
            direction="backward",
            tolerance=tolerance_s,
        ).drop(columns=["time_unix"])
    edges = list(BAND_EDGES)
    labels = [band_label(lo, hi) for lo, hi in zip(edges, edges[1:] + [None])]
    idx = np.searchsorted(np.asarray(edges), req["kv_usage_at_send"].to_numpy(dtype=float), side="right") - 1
    req["kv_band"] = [
        labels[i] if np.isfinite(u) and i >= 0 else "unknown"
        for i, u in zip(idx, req["kv_usage_at_send"].to_numpy(dtype=float))
    ]
    return req


@dataclass(frozen=True, slots=True)
class BandRow:
    band: str
    requests: int
    failed: int
    ttft: Distribution
    tpot: Distribution
    e2e: Distribution

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def latency_by_kv_band(joined: pd.DataFrame) -> list[BandRow]:
    """One row per band that has requests, in band order, "unknown" last."""
    order = [band_label(lo, hi) for lo, hi in zip(BAND_EDGES, list(BAND_EDGES[1:]) + [None])] + ["unknown"]
    rows = []
    for band in order:
        part = joined[joined["kv_band"] == band]
        if part.empty:
            continue
        ok = part[part["ok"]]
        rows.append(
            BandRow(
                band,
                len(part),
                int((~part["ok"]).sum()),
                distribution(ok["ttft_s"].to_numpy(float)),
                distribution(per_request_metrics(ok)["tpot"].to_numpy(float)),
                distribution(ok["e2e_s"].to_numpy(float)),
            )
        )
    return rows


def band_contrast(rows: list[BandRow]) -> str:
    """One sentence comparing TTFT p99 in the fullest and the emptiest KV band that each have
    at least MIN_COMPARE successful requests ("" when fewer than two such bands)."""
    known = [r for r in rows if r.band != "unknown" and r.ttft.count >= MIN_COMPARE]
    if len(known) < 2:
        return ""
    low, high = known[0], known[-1]
    ratio = high.ttft.p99 / low.ttft.p99 if low.ttft.p99 else None
    trend = f" ({ratio:.1f}×)" if ratio else ""
    return (
        f"TTFT p99 was {high.ttft.p99 * 1000:.0f} ms for requests sent at KV usage {high.band}, "
        f"against {low.ttft.p99 * 1000:.0f} ms at {low.band}{trend}."
    )


@dataclass(frozen=True, slots=True)
class PreemptionSplit:
    onset_unix: float | None
    before: Distribution = field(
        default_factory=lambda: Distribution(0)
    )  # TTFT of requests sent before onset
    after: Distribution = field(default_factory=lambda: Distribution(0))
    e2e_before: Distribution = field(default_factory=lambda: Distribution(0))
    e2e_after: Distribution = field(default_factory=lambda: Distribution(0))
    ttft_p99_ratio: float | None = None  # after / before
    verdict: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_at_preemption(requests: pd.DataFrame, onset_unix: float | None) -> PreemptionSplit:
    """TTFT and E2E before vs after preemptions begin, with a one-line verdict."""
    if onset_unix is None:
        return PreemptionSplit(None, verdict="No preemptions during the run.")
    ok = requests[requests["ok"]]
    early, late = ok[ok["send_time_unix"] < onset_unix], ok[ok["send_time_unix"] >= onset_unix]
    before, after = (
        distribution(early["ttft_s"].to_numpy(float)),
        distribution(late["ttft_s"].to_numpy(float)),
    )
    e_before, e_after = (
        distribution(early["e2e_s"].to_numpy(float)),
        distribution(late["e2e_s"].to_numpy(float)),
    )
    if before.count < MIN_COMPARE or after.count < MIN_COMPARE:
        verdict = (
            f"Preemptions began, but too few requests on one side to compare "
            f"({before.count} before, {after.count} after; need {MIN_COMPARE} each)."
        )
        return PreemptionSplit(onset_unix, before, after, e_before, e_after, None, verdict)
    ratio = after.p99 / before.p99 if before.p99 else None
    if ratio is not None and ratio > 1.0:
        verdict = (
            f"TTFT p99 was higher after preemptions began: {after.p99 * 1000:.0f} ms vs "
            f"{before.p99 * 1000:.0f} ms before ({ratio:.1f}×)."
        )
    else:
        verdict = (
            f"TTFT p99 was not higher after preemptions began: {after.p99 * 1000:.0f} ms vs "
            f"{before.p99 * 1000:.0f} ms before."
        )
    return PreemptionSplit(onset_unix, before, after, e_before, e_after, ratio, verdict)


@dataclass(frozen=True, slots=True)
class ClientServerTiming:
    """Per-request client minus server timing, where the server reports its own timings."""

    available: bool
    requests: int = 0
    ttft_overhead: Distribution = field(default_factory=lambda: Distribution(0))  # client TTFT - server TTFT
    e2e_overhead: Distribution = field(default_factory=lambda: Distribution(0))
    server_queue: Distribution = field(default_factory=lambda: Distribution(0))
    queue_share_of_ttft_median: float | None = None  # how much of TTFT was waiting to be scheduled
    preempted_requests: int = 0
    ttft_preempted: Distribution = field(default_factory=lambda: Distribution(0))
    ttft_not_preempted: Distribution = field(default_factory=lambda: Distribution(0))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def per_request_timing(requests: pd.DataFrame) -> pd.DataFrame:
    """request_id, send_time_unix, client and server TTFT/E2E and their differences (ok requests)."""
    ok = requests[requests["ok"] & requests["server_ttft_s"].notna()]
    return pd.DataFrame(
        {
            "request_id": ok["request_id"],
            "send_time_unix": ok["send_time_unix"],
            "ttft_s": ok["ttft_s"],
            "server_ttft_s": ok["server_ttft_s"],
            "ttft_overhead_s": ok["ttft_s"] - ok["server_ttft_s"],
            "e2e_overhead_s": ok["e2e_s"] - ok["server_e2e_s"],
            "server_queue_time_s": ok["server_queue_time_s"],
            "server_num_preemptions": pd.to_numeric(ok["server_num_preemptions"], errors="coerce"),
        }
    )


def client_vs_server(requests: pd.DataFrame) -> ClientServerTiming:
    t = per_request_timing(requests)
    if t.empty:
        return ClientServerTiming(False)
    share = (t["server_queue_time_s"] / t["ttft_s"]).where(t["ttft_s"] > 0).dropna()
    pre = t["server_num_preemptions"].fillna(0) > 0
    return ClientServerTiming(
        True,
        len(t),
        distribution(t["ttft_overhead_s"].to_numpy(float)),
        distribution(t["e2e_overhead_s"].to_numpy(float)),
        distribution(t["server_queue_time_s"].to_numpy(float)),
        float(share.median()) if len(share) else None,
        int(pre.sum()),
        distribution(t.loc[pre, "ttft_s"].to_numpy(float)),
        distribution(t.loc[~pre, "ttft_s"].to_numpy(float)),
    )


@dataclass(frozen=True, slots=True)
class JoinReport:
    kv_bands: list[BandRow]
    kv_band_verdict: str
    preemption: PreemptionSplit
    client_server: ClientServerTiming

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def analyse_join(all_requests: pd.DataFrame, tl: pd.DataFrame, onset_unix: float | None) -> JoinReport:
    requests = measured(all_requests)
    bands = latency_by_kv_band(attach_server_state(requests, tl))
    return JoinReport(
        bands, band_contrast(bands), split_at_preemption(requests, onset_unix), client_vs_server(requests)
    )
