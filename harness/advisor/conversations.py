"""The conversations in a run's requests, as a replay carries them: which turns continue which,
how much of each prompt is the conversation so far, and the stem its first turn shares with
other conversations (a system prompt, an agent's preamble).

A session's turn k continues turn k-1 when k-1 is among the completed requests and, where the
record has the digests, its `history_hash` is k-1's `conversation_hash` (the client sent k-1's
messages and answer whole). A conversation is a run of continuing turns; a turn that does not
continue starts a new one. Turn k's history is k-1's prompt and answer, as the server counted
them: the tokens a server that kept k-1's blocks finds cached (whole blocks of them).

The stem is the part of a conversation's first prompt shared with another conversation's
first prompt, from the prompt fingerprints (`prefixes`: one stream per shared branch); a
first turn served with C cached tokens shares at least C (less its last token). Without
fingerprints a conversation has no stem.

Invariants: one `Turn` per row of the frame given, in its order; `history_tokens` < the
turn's prompt tokens; `stem_tokens` < its conversation's first prompt tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.advisor.prefixes import analyse, prompt_shape
from harness.workload import fingerprint as fp

NOT_IN_A_SESSION = -1
CACHED_COLUMNS = ("cached_tokens", "server_cached_prompt_tokens")  # usage first, else the server's timings


@dataclass(frozen=True, slots=True)
class Turn:
    """One request's place in its conversation (conversation -1: outside any session)."""

    conversation: int
    turn: int
    history_tokens: int  # the previous turn's prompt and answer this prompt starts with (0: a first turn)
    stem_group: int  # -1: no stem shared with another conversation
    stem_tokens: int


def cached_tokens(done: pd.DataFrame) -> list[int]:
    """Each request's prompt tokens served from the prefix cache (usage, else the server's
    own timings), 0 where neither says."""
    cached = pd.Series(np.nan, index=done.index)
    for column in CACHED_COLUMNS:
        if column in done.columns:
            cached = cached.fillna(pd.to_numeric(done[column], errors="coerce"))
    return cached.fillna(0).astype(int).tolist()


def has_sessions(done: pd.DataFrame) -> bool:
    return "session_id" in done.columns and "turn" in done.columns and done["session_id"].notna().any()


def _continues(turn: pd.Series, previous: pd.Series) -> bool:
    mine, theirs = turn.get("history_hash"), previous.get("conversation_hash")
    return not (isinstance(mine, str) and isinstance(theirs, str)) or mine == theirs


def _stems(done: pd.DataFrame, first: list[int]) -> dict[int, tuple[int, int]]:
    """Row -> (stem group, stem tokens), for the first turns `first` (rows in send order)."""
    if not first or fp.HASHES_COLUMN not in done.columns or fp.CHARS_COLUMN not in done.columns:
        return {}
    shapes = [prompt_shape(done.at[row, fp.HASHES_COLUMN], done.at[row, fp.CHARS_COLUMN]) for row in first]
    out, cached = {}, cached_tokens(done)
    for row, shape, sharing in zip(first, shapes, analyse(shapes)):
        prompt, chars = int(done.at[row, "prompt_tokens"]), sum(shape.chars)
        tokens = min(prompt - 1, int(sharing.shared_chars * prompt / chars)) if chars else 0
        tokens = max(tokens, min(prompt - 1, cached[row]))
        if sharing.group >= 0 and tokens > 0:
            out[row] = (sharing.group, tokens)
    return out


def conversation_turns(done: pd.DataFrame) -> list[Turn]:
    """One Turn per row of `done` (see the module doc)."""
    out = [Turn(NOT_IN_A_SESSION, 0, 0, -1, 0)] * len(done)
    if not has_sessions(done):
        return out
    rows = done[done["session_id"].notna() & pd.to_numeric(done["turn"], errors="coerce").notna()]
    rows = rows.assign(_turn=pd.to_numeric(rows["turn"]).astype(int)).sort_values(["session_id", "_turn"])
    starts: dict[int, int] = {}  # row -> its conversation (first turns only)
    history: dict[int, tuple[int, int]] = {}  # row -> (conversation, history tokens)
    for _, session in rows.groupby("session_id", sort=False):
        last: tuple[int, pd.Series] | None = None
        for row, turn in session.iterrows():
            if last is not None and turn["_turn"] == last[1]["_turn"] + 1 and _continues(turn, last[1]):
                carried = int(last[1]["prompt_tokens"]) + int(last[1]["output_tokens"])
                history[row] = (history[last[0]][0], min(int(turn["prompt_tokens"]) - 1, carried))
            else:
                starts[row] = len(starts)
                history[row] = (starts[row], 0)
            last = (row, turn)
    first = sorted(starts, key=lambda r: (done.at[r, "send_time_unix"], r))
    stems = _stems(done, first)
    by_conversation = {starts[r]: stems.get(r, (-1, 0)) for r in starts}
    for row, (conversation, tokens) in history.items():
        group, stem = by_conversation[conversation]
        out[row] = Turn(conversation, int(rows.at[row, "_turn"]), tokens, group, stem)
    return out


CONVERSATION_GROUPS = 1 << 30  # replay group ids of conversations, apart from the prompts' own groups
STEM_GROUPS = 1 << 29


@dataclass(frozen=True, slots=True)
class ReplayPrefix:
    """What a trace request carries of its prompt's sharing (`TraceRequest`'s fields)."""

    prefix_group: int
    prefix_tokens: int
    stem_group: int = -1
    stem_tokens: int = 0
    answer_continues: bool = False


def replay_prefix(turn: Turn | None, group: tuple[int, int], prompt_tokens: int) -> ReplayPrefix:
    """A session's turn is its conversation's stream whole (after its stem), and its answer
    continues it; any other request keeps its shared-prefix `group` (group, tokens)."""
    if turn is None or turn.conversation < 0:
        return ReplayPrefix(*group)
    stem = STEM_GROUPS + turn.stem_group if turn.stem_group >= 0 else -1
    return ReplayPrefix(CONVERSATION_GROUPS + turn.conversation, prompt_tokens, stem, turn.stem_tokens, True)
