"""Sessions (multi-turn chats, agent loops, replayed conversations): what the prefix cache
kept of each conversation between its turns, turn by turn.

Turn k re-sends turn k-1's whole prompt, so a prefix cache that kept the session's blocks
reports at least that prompt, less its last partial block, as cached:
`cached_tokens[k] >= prompt_tokens[k-1] - block_size`. A continuing turn below that found its
history evicted in between (its blocks were reused for other requests while the session
thought), and pays for it in prefill: `ttft_evicted` against `ttft_kept` shows how much.
A session whose turn the server preempted mid-flight (`server_num_preemptions`, reported by
the reference engine) is counted apart: preemption is a capacity event within a request,
eviction one between requests.

Invariants: only measured, successful requests with a session id enter a figure; a pair of
turns is compared only when both are present and consecutive (k-1, k) in one session; a
figure with no data is None, never 0. `cached_tokens` is the record's single column for
every server's report (usage, the reference engine's timing object, llama.cpp's `cache_n`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.stats import Distribution, distribution
from harness.bundle.errors import BundleError
from harness.bundle.read import Bundle, measured
from harness.formatting import ms
from harness.workload.sessions import SESSION_ENDS

DEFAULT_BLOCK_SIZE = 16  # vLLM's default, when neither the server nor run.json states one
OPEN = "open"  # a session the run ended between its turns


@dataclass(frozen=True, slots=True)
class TurnFigures:
    """One turn index over every session that reached it. `hit_ratio`: cached over prompt
    tokens, summed; `evicted`: continuing turns (k >= 1) that found their history evicted."""

    turn: int
    requests: int
    ttft: Distribution
    prompt_tokens_mean: float | None
    cached_tokens_mean: float | None
    hit_ratio: float | None
    evicted: int

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ttft": self.ttft.to_dict()}


@dataclass(frozen=True, slots=True)
class SessionAnalysis:
    """`continuing_turns`: turns k >= 1 whose turn k-1 is in the data; `history_cached`: the
    share of them whose cached tokens covered turn k-1's prompt (less one block);
    `history_carried`: the share whose message list began with turn k-1's messages and answer
    (the client's own check, from the record's digests)."""

    sessions: int
    ends: dict[str, int]
    turns_per_session: Distribution
    completion_time_s: Distribution
    block_size: int
    by_turn: list[TurnFigures] = field(default_factory=list)
    continuing_turns: int = 0
    history_cached: float | None = None
    history_carried: float | None = None
    evicted_turns: int = 0
    sessions_evicted: int = 0
    sessions_preempted: int = 0
    ttft_evicted: Distribution = field(default_factory=lambda: Distribution(0))
    ttft_kept: Distribution = field(default_factory=lambda: Distribution(0))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("turns_per_session", "completion_time_s", "ttft_evicted", "ttft_kept"):
            out[name] = getattr(self, name).to_dict()
        out["by_turn"] = [t.to_dict() for t in self.by_turn]
        out["verdict"] = self.verdict()
        return out

    def verdict(self) -> str | None:
        if self.history_cached is None:
            return None
        line = (
            f"{self.sessions} sessions: the prefix cache held the history for {self.history_cached:.0%} of "
            f"{self.continuing_turns} continuing turns"
        )
        if self.evicted_turns:
            line += (
                f"; {self.evicted_turns} turn(s) in {self.sessions_evicted} session(s) found it evicted "
                f"(TTFT p50 {ms(self.ttft_evicted.p50)} against {ms(self.ttft_kept.p50)} with it kept)"
            )
        return line + "."


def _numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame.columns:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[column], errors="coerce").astype(float)


def session_rows(requests: pd.DataFrame) -> pd.DataFrame:
    """Measured requests that belong to a session, ordered by session and turn."""
    if "session_id" not in requests.columns:
        return requests.iloc[0:0]
    rows = measured(requests)
    rows = rows[rows["session_id"].notna()]
    rows = rows.assign(turn=_numeric(rows, "turn"), cached=_numeric(rows, "cached_tokens"))
    return rows.sort_values(["session_id", "turn"], kind="stable")


def _pairs(rows: pd.DataFrame, block_size: int) -> pd.DataFrame:
    """Each ok turn k >= 1 next to its session's ok turn k-1: whether it was evicted."""
    ok = rows[rows["ok"].astype(bool)]
    previous = ok[["session_id", "turn", "prompt_tokens", "conversation_hash"]].rename(
        columns={"prompt_tokens": "previous_prompt", "conversation_hash": "previous_hash"}
    )
    pairs = ok.merge(previous.assign(turn=previous["turn"] + 1), on=["session_id", "turn"], how="inner")
    known = pairs["cached"].notna() & pairs["previous_prompt"].notna()
    pairs = pairs.assign(
        known=known,
        evicted=known & (pairs["cached"] < pairs["previous_prompt"] - block_size),
        carried=pairs["history_hash"] == pairs["previous_hash"],
    )
    return pairs


def _by_turn(rows: pd.DataFrame, pairs: pd.DataFrame) -> list[TurnFigures]:
    ok = rows[rows["ok"].astype(bool)]
    out = []
    for turn, group in ok.groupby("turn"):
        prompt = _numeric(group, "prompt_tokens")
        both = group["cached"].notna() & prompt.notna()
        total = float(prompt[both].sum())
        out.append(
            TurnFigures(
                turn=int(turn),
                requests=len(group),
                ttft=distribution(group["ttft_s"].to_numpy(float)),
                prompt_tokens_mean=float(prompt.mean()) if prompt.notna().any() else None,
                cached_tokens_mean=float(group["cached"].mean()) if group["cached"].notna().any() else None,
                hit_ratio=float(group["cached"][both].sum()) / total if total > 0 else None,
                evicted=int(pairs["evicted"][pairs["turn"] == turn].sum()),
            )
        )
    return out


def _ends(rows: pd.DataFrame) -> dict[str, int]:
    last = rows.groupby("session_id").tail(1)
    ends = last["session_end"].where(last["session_end"].notna(), OPEN) if "session_end" in last else None
    counts = ends.value_counts() if ends is not None else pd.Series(dtype=int)
    return {name: int(counts.get(name, 0)) for name in (*SESSION_ENDS, OPEN)}


def _completion_times(rows: pd.DataFrame) -> np.ndarray:
    if "session_end" not in rows.columns:
        return np.array([])
    done = rows.groupby("session_id").filter(lambda g: (g["session_end"] == "completed").any())
    if done.empty:
        return np.array([])
    end = done["send_time_unix"] + done["e2e_s"].fillna(0.0)
    spans = end.groupby(done["session_id"]).max() - done.groupby("session_id")["send_time_unix"].min()
    return spans.to_numpy(float)


def analyse_sessions(requests: pd.DataFrame, block_size: int | None = None) -> SessionAnalysis | None:
    """The session figures of a run's requests, or None when no request belongs to a session."""
    rows = session_rows(requests)
    if rows.empty:
        return None
    size = int(block_size) if block_size and block_size > 0 else DEFAULT_BLOCK_SIZE
    pairs = _pairs(rows, size)
    known = pairs[pairs["known"]]
    evicted = known[known["evicted"]]
    preempted = rows[_numeric(rows, "server_num_preemptions").fillna(0) > 0]
    return SessionAnalysis(
        sessions=int(rows["session_id"].nunique()),
        ends=_ends(rows),
        turns_per_session=distribution(rows.groupby("session_id").size().to_numpy(float)),
        completion_time_s=distribution(_completion_times(rows)),
        block_size=size,
        by_turn=_by_turn(rows, pairs),
        continuing_turns=len(pairs),
        history_cached=float(1.0 - known["evicted"].mean()) if len(known) else None,
        history_carried=float(pairs["carried"].mean()) if len(pairs) else None,
        evicted_turns=len(evicted),
        sessions_evicted=int(evicted["session_id"].nunique()),
        sessions_preempted=int(preempted["session_id"].nunique()),
        ttft_evicted=distribution(evicted["ttft_s"].to_numpy(float)),
        ttft_kept=distribution(known[~known["evicted"]]["ttft_s"].to_numpy(float)),
    )


def block_size_of(server: pd.DataFrame, deployment_block_size: Any) -> int | None:
    """The server's own block size (its last stated `kv_block_size_tokens`), else the run's
    deployment facts', else None."""
    if "kv_block_size_tokens" in server.columns:
        stated = pd.to_numeric(server["kv_block_size_tokens"], errors="coerce").dropna()
        if len(stated):
            return int(stated.iloc[-1])
    return int(deployment_block_size) if isinstance(deployment_block_size, (int, float)) else None


def bundle_sessions(bundle: Bundle) -> SessionAnalysis | None:
    """The analysis with the block size the run states, or None for a run without sessions."""
    try:
        fact = bundle.deployment.engine.get("block_size") if bundle.deployment else None
    except BundleError:  # malformed facts: the server's own samples may still say
        fact = None
    return analyse_sessions(bundle.requests, block_size_of(bundle.server, fact.value if fact else None))


def session_summary(bundle: Bundle) -> dict[str, Any] | None:
    """summary.json's `sessions` (`bundle_sessions` as a dict), or None."""
    analysis = bundle_sessions(bundle)
    return analysis.to_dict() if analysis else None
