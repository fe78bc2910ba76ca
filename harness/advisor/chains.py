"""Closed-loop users in a run's requests: which user sent each request, and how long after
its previous answer ended it went out, so a replay can send it that long after the previous
request finishes in the replay (`reference_engine.sim.arrivals`).

A user's requests are its `user_id` (recorded since kvscope records it). An older bundle has
none, and the chains are rebuilt from the timings: in send order, each request continues the
user whose last request ended most recently before it was sent (a closed-loop user sends the
moment its answer is in, plus its think time), and starts a new user while the run's user
count is not reached. The gap is measured on the server's clock when both requests have the
server's timings (arrival to arrival minus the previous one's server-side duration: what the
engine saw), else on the client's (send to send minus the previous one's E2E). A gap is
never negative.

An open-loop run (a request rate, a trace replay) has no users to chain, but its
conversations are chains too: a session's turn goes out after the previous turn's answer
(`session_id`, the multi-turn workloads and a replayed trace with sessions). Requests outside
any session are replayed at their recorded send times.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

ChainSource = Literal["user_id", "rebuilt", "session_id", "open_loop"]
END_SLACK_S = 0.05  # a request sent this soon before another one's recorded end still follows it


@dataclass(frozen=True, slots=True)
class Chains:
    """Per row of the frame given: the chain (-1: none) and the gap after its predecessor."""

    chain: np.ndarray
    after_s: np.ndarray
    source: ChainSource

    def part(self, start: int, stop: int) -> Chains:
        """The rows start:stop."""
        return Chains(self.chain[start:stop], self.after_s[start:stop], self.source)

    @property
    def users(self) -> int:
        return len(set(self.chain[self.chain >= 0].tolist()))


def closed_loop(run: dict[str, Any]) -> bool:
    """Was the run a closed loop (users waiting on answers) rather than a schedule?"""
    config = run.get("config") if isinstance(run.get("config"), dict) else {}
    return not config.get("rate") and config.get("workload") not in (None, "replay")


def _num(rows: pd.DataFrame, name: str) -> np.ndarray:
    if name not in rows.columns:
        return np.full(len(rows), np.nan)
    return pd.to_numeric(rows[name], errors="coerce").to_numpy(float)


def _rebuilt(send: np.ndarray, end: np.ndarray, users: int | None) -> np.ndarray:
    """Chains from timings alone (see the module doc)."""
    chain = np.full(len(send), -1)
    last_end: list[float] = []  # per chain
    for i in np.argsort(send, kind="stable"):
        free = [c for c, e in enumerate(last_end) if e <= send[i] + END_SLACK_S]
        if free:
            c = max(free, key=lambda k: last_end[k])
        elif users is None or len(last_end) < users:
            c = len(last_end)
            last_end.append(-np.inf)
        else:  # more in flight than users: the earliest to end is the likeliest sender
            c = int(np.argmin(last_end))
        chain[i] = c
        last_end[c] = end[i] if np.isfinite(end[i]) else send[i]
    return chain


def find_chains(rows: pd.DataFrame, run: dict[str, Any]) -> Chains:
    """The chains of `rows` (the requests to replay, any order)."""
    n = len(rows)
    sessions = rows["session_id"] if "session_id" in rows.columns else pd.Series([None] * n, dtype=object)
    if n == 0 or (not closed_loop(run) and sessions.isna().all()):
        return Chains(np.full(n, -1), np.zeros(n), "open_loop")
    send = _num(rows, "send_time_unix")
    client_end = send + np.nan_to_num(_num(rows, "e2e_s"), nan=0.0)
    arrival = _num(rows, "server_arrival_unix")
    server_end = arrival + _num(rows, "server_e2e_s")
    ids = rows["user_id"] if "user_id" in rows.columns else pd.Series([None] * n)
    if not closed_loop(run):
        codes = pd.factorize(sessions.astype(object).where(sessions.notna(), None))[0]
        chain, source = np.where(sessions.notna(), codes, -1), "session_id"
    elif ids.notna().all():
        chain, source = pd.factorize(ids.astype(str))[0], "user_id"
    else:
        config = run.get("config") if isinstance(run.get("config"), dict) else {}
        users = config.get("users") if isinstance(config.get("users"), int) else None
        chain, source = _rebuilt(send, client_end, users), "rebuilt"
    after = np.zeros(n)
    for c in np.unique(chain[chain >= 0]):
        members = np.flatnonzero(chain == c)
        members = members[np.argsort(send[members], kind="stable")]
        for prev, cur in zip(members[:-1], members[1:]):
            server_gap = arrival[cur] - server_end[prev]
            gap = server_gap if np.isfinite(server_gap) else send[cur] - client_end[prev]
            after[cur] = max(0.0, float(gap)) if np.isfinite(gap) else 0.0
    return Chains(np.asarray(chain, dtype=int), after, source)  # type: ignore[arg-type]
