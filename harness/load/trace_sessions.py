"""Replaying a trace's sessions (JSON lines with `session_id`, `harness.workload.traces`):
each turn is sent at its time, but never before the session's previous turn has its answer,
and it carries the whole conversation so far.

The schedule hands every turn of a session to one worker (`TraceEntry.shard`) in turn order,
and users of that worker share this state (per test, in the run context's cache). A turn's
new user message is sized so that the prompt reaches the trace's `prompt_tokens`: what the
history already holds (the server's own count of the previous prompt and answer) is taken
off, down to a message of MIN_NEW_TOKENS; `target_prompt_tokens` records what was aimed at.
A turn whose request fails is skipped in the history and the session goes on, as the trace
does; its last turn ends the session ("completed", or how that request ended).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from gevent.event import Event

from harness.workload.calibration import Calibration
from harness.workload.prompts import text
from harness.workload.record import RequestRecord
from harness.workload.sessions import TEMPLATE_TOKENS_PER_MESSAGE, Session, SessionEnd, Turn, close_turn
from harness.workload.trace_entry import TraceEntry

MIN_NEW_TOKENS = 4
WAKE_S = 0.25  # how often a waiting turn looks at the drain flag


@dataclass(slots=True)
class TraceSession:
    session: Session
    last_turn: int
    changed: Event = field(default_factory=Event)  # set whenever a turn of the session ends


@dataclass(slots=True)
class TraceSessions:
    """The sessions this worker replays: `last_turns` maps each id to its final turn index."""

    last_turns: dict[str, int]
    sessions: dict[str, TraceSession] = field(default_factory=dict)

    @classmethod
    def of(cls, entries: list[TraceEntry]) -> TraceSessions:
        last: dict[str, int] = {}
        for e in entries:
            if e.session_id is not None and e.turn is not None:
                last[e.session_id] = max(e.turn, last.get(e.session_id, 0))
        return cls(last)

    def get(self, session_id: str) -> TraceSession:
        found = self.sessions.get(session_id)
        if found is None:
            session = Session(session_id, self.last_turns.get(session_id, 0) + 1)
            found = self.sessions[session_id] = TraceSession(session, self.last_turns.get(session_id, 0))
        return found

    def wait_for_turn(self, entry: TraceEntry, stop: Callable[[], bool]) -> TraceSession | None:
        """Block until every earlier turn of `entry`'s session has ended (None if `stop()`
        turns true first)."""
        assert entry.session_id is not None and entry.turn is not None
        state = self.get(entry.session_id)
        while state.session.turn < entry.turn or state.session.pending is not None:
            if stop():
                return None
            state.changed.clear()
            state.changed.wait(WAKE_S)
        return state


def next_messages(
    state: TraceSession, entry: TraceEntry, calibration: Calibration, rng: random.Random, max_tokens: int
) -> tuple[list[dict[str, str]], int]:
    """Make `entry` the session's pending turn; return its message list and the prompt tokens
    it aims at."""
    session = state.session
    history = session.history_tokens()
    if history is None:  # nothing answered yet: the whole prompt is the new message
        new_tokens, words = entry.prompt_tokens, calibration.words_for(entry.prompt_tokens)
    else:
        new_tokens = max(MIN_NEW_TOKENS, entry.prompt_tokens - history - TEMPLATE_TOKENS_PER_MESSAGE)
        words = calibration.words_for(new_tokens, include_overhead=False)
    session.pending = turn = Turn(({"role": "user", "content": text(rng, words)},), max_tokens, new_tokens)
    target = session.estimated_prompt_tokens(turn, entry.prompt_tokens)
    return session.request_messages(), max(entry.prompt_tokens, target)


def close_trace_turn(state: TraceSession, rec: RequestRecord, answer: str | None) -> None:
    """Fill the record's session columns; a failed turn is skipped (the trace goes on unless
    the run is ending), the session's last turn ends it; wake the session's next turn."""
    session = state.session
    end: SessionEnd | None = close_turn(session, rec, answer)
    if end is not None:
        session.skip_pending()
    if rec.turn == state.last_turn:
        end = end or "completed"
    elif end != "stopped":
        end = None
    rec.session_end = session.end = end
    state.changed.set()
