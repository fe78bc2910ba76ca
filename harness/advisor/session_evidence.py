"""What sessions ask of the prefix cache: how much of each prompt is the conversation so far
(its history), how many blocks a pool needs to keep histories cached between turns, and how
close the conversations come to max_model_len.

History share: over the session turns, the tokens that are the previous turn's prompt and
answer (`conversations`) over all their prompt tokens: what a cache that kept every history
would not prefill again.

Reuse distances: the trace's blocks, as the replay builds them (a conversation's blocks after
its stem, the stem's blocks shared between conversations, other requests' shared-prefix
blocks), touched in send order by each request's prompt and answer (whole blocks only). A
block's reuse distance is the count of distinct blocks touched since it was last touched,
itself included: a pool of N blocks, evicting the least recently used, still holds it iff
that distance is at most N (Mattson's stack distance). A turn's history distance is the
largest distance over its history's blocks; the curve gives, per pool size (the run's and larger),
the share of continuing turns whose history stays cached and the hit ratio over every
completed request: each prompt's leading blocks up to its first one farther than N (a prefix
cache hits a prefix; the pool's null block holds nothing). The model ignores the
blocks running requests pin (a busy server keeps less than N), so the replay verifies it.

Context limit: the longest conversation (prompt and answer of its last turn) against
max_model_len; NEAR_LIMIT of it means the next turns of such a session will not fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from exporter.kv_events.curve import POOL_INCREASES, extra_blocks
from harness.advisor.conversations import Turn, has_sessions

NEAR_LIMIT = 0.9
UNSEEN = math.inf


@dataclass(frozen=True, slots=True)
class ReusePoint:
    pool_blocks: int | None  # None: unbounded
    history_kept: float | None  # share of continuing turns whose whole history is still cached
    hit_ratio: float


@dataclass(frozen=True, slots=True)
class SessionEvidence:
    sessions: int
    conversations: int  # runs of continuing turns (a session whose history broke counts twice)
    turns: int
    continuing_turns: int
    prompt_tokens: int
    history_tokens: int
    history_distance_p50: float | None  # blocks touched between a history's two uses
    history_distance_max: float | None
    curve: tuple[ReusePoint, ...]
    first_touches: int  # block lookups never touched before (no pool hits them)
    queried_tokens: int  # every completed request's prompt tokens (the curve's hit ratios are over them)
    max_model_len: int | None
    longest_conversation_tokens: int
    near_limit_sessions: int  # sessions whose longest turn reached NEAR_LIMIT of max_model_len

    @property
    def history_share(self) -> float:
        return self.history_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def to_dict(self) -> dict:
        return {
            "sessions": self.sessions,
            "conversations": self.conversations,
            "turns": self.turns,
            "continuing_turns": self.continuing_turns,
            "prompt_tokens": self.prompt_tokens,
            "history_tokens": self.history_tokens,
            "history_share": round(self.history_share, 4),
            "history_distance_blocks_p50": self.history_distance_p50,
            "history_distance_blocks_max": self.history_distance_max,
            "reuse_curve": [
                {
                    "pool_blocks": p.pool_blocks,
                    "history_kept": None if p.history_kept is None else round(p.history_kept, 4),
                    "hit_ratio": round(p.hit_ratio, 4),
                }
                for p in self.curve
            ],
            "first_touches": self.first_touches,
            "queried_tokens": self.queried_tokens,
            "max_model_len": self.max_model_len,
            "longest_conversation_tokens": self.longest_conversation_tokens,
            "near_limit_sessions": self.near_limit_sessions,
        }


def block_keys(turn: Turn | None, group: tuple[int, int], row: int, tokens: int, block: int) -> list[tuple]:
    """The whole blocks of one request's first `tokens` tokens, as the replay shares them."""
    keys: list[tuple] = []
    for j in range(tokens // block):
        end = (j + 1) * block
        if turn is not None and turn.conversation >= 0:
            shared = turn.stem_group >= 0 and end <= turn.stem_tokens
            keys.append(("stem", turn.stem_group, j) if shared else ("conversation", turn.conversation, j))
        elif group[0] >= 0 and end <= group[1]:
            keys.append(("group", group[0], j))
        else:
            keys.append(("request", row, j))
    return keys


class _Recency:
    """Distinct blocks touched since a block's last touch (a Fenwick tree over touch times)."""

    def __init__(self, touches: int) -> None:
        self.tree = [0] * (touches + 1)
        self.last: dict[tuple, int] = {}
        self.now = 0

    def _add(self, i: int, v: int) -> None:
        i += 1
        while i < len(self.tree):
            self.tree[i] += v
            i += i & -i

    def _prefix(self, i: int) -> int:
        total = 0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total

    def distance(self, key: tuple) -> float:
        last = self.last.get(key)
        return UNSEEN if last is None else float(self._prefix(self.now) - self._prefix(last))

    def touch(self, key: tuple) -> None:
        if (last := self.last.get(key)) is not None:
            self._add(last, -1)
        self._add(self.now, 1)
        self.last[key] = self.now
        self.now += 1


def reuse_distances(
    done: pd.DataFrame, turns: tuple[Turn, ...], groups: list[tuple[int, int]], block: int
) -> list[np.ndarray]:
    """Per row of `done`: the running maximum of its prompt blocks' reuse distances, leading
    block first (a pool of N hits the blocks whose running maximum is at most N)."""
    order = np.argsort(done["send_time_unix"].to_numpy(float), kind="stable")
    prompt = done["prompt_tokens"].astype(int).to_numpy()
    total = prompt + done["output_tokens"].astype(int).to_numpy()
    keys = [
        block_keys(turns[i] if turns else None, groups[i], i, int(total[i]), block) for i in range(len(done))
    ]
    recency = _Recency(sum(len(k) for k in keys))
    out: list[np.ndarray] = [np.empty(0)] * len(done)
    for i in order:
        looked_up = keys[i][: (int(prompt[i]) - 1) // block]  # an engine always computes the last token
        out[i] = np.maximum.accumulate([recency.distance(k) for k in looked_up]) if looked_up else np.empty(0)
        for k in keys[i]:
            recency.touch(k)
    return out


def session_evidence(
    done: pd.DataFrame,
    turns: tuple[Turn, ...],
    groups: list[tuple[int, int]],
    block: int,
    pool_blocks: int | None,
    max_model_len: int | None,
) -> SessionEvidence | None:
    """None for a run without sessions (see the module doc)."""
    if not turns or not has_sessions(done):
        return None
    distances = reuse_distances(done, turns, groups, block)
    in_session = [i for i, t in enumerate(turns) if t.conversation >= 0]
    continuing = [i for i in in_session if turns[i].history_tokens > 0]
    history = [
        float(distances[i][min(len(distances[i]), turns[i].history_tokens // block) - 1])
        for i in continuing
        if turns[i].history_tokens >= block and len(distances[i])
    ]
    prompt = done["prompt_tokens"].astype(int).to_numpy()
    every = np.concatenate(distances) if distances else np.empty(0)
    queried = int(prompt.sum())
    pools = (
        [pool_blocks, *(pool_blocks + extra_blocks(pool_blocks, i) for i in POOL_INCREASES)]
        if pool_blocks
        else []
    )

    def point(pool: float) -> ReusePoint:
        held = pool - 1  # the null block holds nothing
        kept = sum(d <= held for d in history) / len(history) if history else None
        hit = block * int((np.isfinite(every) & (every <= held)).sum()) / queried if queried else 0.0
        return ReusePoint(None if math.isinf(pool) else int(pool), kept, hit)

    sessions = done.iloc[in_session]
    context = sessions["prompt_tokens"].astype(int) + sessions["output_tokens"].astype(int)
    longest = context.groupby(sessions["session_id"]).max()
    return SessionEvidence(
        sessions=int(sessions["session_id"].nunique()),
        conversations=len({turns[i].conversation for i in in_session}),
        turns=len(in_session),
        continuing_turns=len(continuing),
        prompt_tokens=int(prompt[in_session].sum()),
        history_tokens=sum(turns[i].history_tokens for i in continuing),
        history_distance_p50=float(np.median(history)) if history else None,
        history_distance_max=float(max(history)) if history else None,
        curve=tuple(point(n) for n in [*pools, UNSEEN]),
        first_touches=int(np.isinf(every).sum()),
        queried_tokens=queried,
        max_model_len=max_model_len,
        longest_conversation_tokens=int(longest.max()),
        near_limit_sessions=int((longest >= NEAR_LIMIT * max_model_len).sum()) if max_model_len else 0,
    )
